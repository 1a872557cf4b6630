import { connect, type Socket } from 'node:net';

export interface RawClient {
  socket: Socket;
  /** Everything the server sent so far. */
  received: string;
  closedAt?: number;
  openedAt: number;
}

/** A raw client socket to a local port that records what it receives and when the server closes it. */
export async function openSocket(port: number): Promise<RawClient> {
  const socket = connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const client: RawClient = { socket, received: '', openedAt: Date.now() };
  socket.on('data', (chunk: Buffer) => (client.received += chunk.toString()));
  socket.on('error', () => {});
  socket.on('close', () => (client.closedAt = Date.now()));
  return client;
}

/** Whether the server closes the socket within the time given. */
export const closedWithin = (client: RawClient, withinMs: number) =>
  new Promise<boolean>((resolve) => {
    if (client.closedAt) return resolve(true);
    const timer = setTimeout(() => resolve(false), withinMs);
    client.socket.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });

/** Sends a request exactly as written (no normalisation of the path) and resolves with the status line's code and the body. */
export async function sendRaw(port: number, request: string): Promise<{ status: number; body: string }> {
  const client = await openSocket(port);
  client.socket.end(request);
  await closedWithin(client, 5_000);
  const [head = '', body = ''] = client.received.split('\r\n\r\n');
  return { status: Number(head.split(' ')[1]), body };
}
