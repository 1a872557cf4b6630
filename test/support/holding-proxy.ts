import { connect, createServer, type Socket } from 'node:net';

export interface HoldingProxy {
  /** The PostgreSQL URL given, through the proxy. */
  url: string;
  /** From now on, what the server sends is held (a slow network), in order, until release. */
  hold(): void;
  /** Delivers what was held, in order, and passes everything on again. */
  release(): void;
  close(): Promise<void>;
}

/**
 * A TCP proxy in front of a PostgreSQL server that can hold what the server sends: for a test of
 * what an instance does before a notice, already sent, reaches its listening connection.
 */
export async function startHoldingProxy(databaseUrl: string): Promise<HoldingProxy> {
  const target = new URL(databaseUrl);
  let held: Array<() => void> | undefined;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => (held ? held.push(() => client.write(chunk)) : client.write(chunk)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as { port: number }).port);
  return {
    url: url.toString(),
    hold: () => void (held ??= []),
    release() {
      const deliveries = held ?? [];
      held = undefined;
      for (const deliver of deliveries) deliver();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
