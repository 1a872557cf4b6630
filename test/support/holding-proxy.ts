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

/** How a proxy passes on what each side sends: `deliver` writes it to the other side. */
type Relay = (chunk: Buffer, deliver: () => void) => void;

/** A TCP proxy to the server of a URL (PostgreSQL, Redis), relaying what each side sends as told. */
async function startProxy(serverUrl: string, defaultPort: number, relay: { toServer: Relay; toClient: Relay }) {
  const target = new URL(serverUrl);
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || defaultPort), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (chunk: Buffer) => relay.toServer(chunk, () => upstream.write(chunk)));
    upstream.on('data', (chunk: Buffer) => relay.toClient(chunk, () => client.write(chunk)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(serverUrl);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as { port: number }).port);
  return {
    url: url.toString(),
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const passOn: Relay = (_chunk, deliver) => deliver();

/**
 * A TCP proxy in front of a PostgreSQL server that can hold what the server sends: for a test of
 * what an instance does before a notice, already sent, reaches its listening connection.
 */
export async function startHoldingProxy(databaseUrl: string): Promise<HoldingProxy> {
  let held: Array<() => void> | undefined;
  const proxy = await startProxy(databaseUrl, 5432, {
    toServer: passOn,
    toClient: (_chunk, deliver) => (held ? held.push(deliver) : deliver()),
  });
  return {
    ...proxy,
    hold: () => void (held ??= []),
    release() {
      const deliveries = held ?? [];
      held = undefined;
      for (const deliver of deliveries) deliver();
    },
  };
}

export interface CommandHoldingProxy {
  /** The Redis URL given, through the proxy. */
  url: string;
  /** From now on, each `command` a client sends is held, with what that client sends after it, in order, until release. */
  hold(): void;
  /** Resolves once a command is held: at once if one is. */
  held(): Promise<void>;
  /** Sends on what was held, in order, and passes everything on again. */
  release(): void;
  close(): Promise<void>;
}

/**
 * A TCP proxy in front of Redis that can hold a command a client sends on its way: for a test of
 * what an instance does before Redis has applied a command of its.
 */
export async function startCommandHoldingProxy(redisUrl: string, command: string): Promise<CommandHoldingProxy> {
  // As a client sends it: an array of bulk strings, the command's name first.
  const named = new RegExp(String.raw`\$${command.length}\r\n${command}\r\n`, 'i');
  let holding = false;
  let held: Array<() => void> | undefined;
  let onHeld: (() => void) | undefined;
  const proxy = await startProxy(redisUrl, 6379, {
    toServer(chunk, deliver) {
      if (!held && !(holding && named.test(chunk.toString('latin1')))) return deliver();
      (held ??= []).push(deliver);
      onHeld?.();
    },
    toClient: passOn,
  });
  return {
    ...proxy,
    hold: () => void (holding = true),
    held: () => (held ? Promise.resolve() : new Promise<void>((resolve) => (onHeld = resolve))),
    release() {
      const deliveries = held ?? [];
      holding = false;
      held = undefined;
      onHeld = undefined;
      for (const deliver of deliveries) deliver();
    },
  };
}
