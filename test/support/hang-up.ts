import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { Database } from '../../src/platform/db/database.js';
import { openSocket } from './raw-socket.js';

/**
 * Holds every key lookup in the database (on PGlite, every query: it has one connection) until
 * released, as a slow database would: a transaction that locks the keys' table.
 */
export async function holdKeyLookups(db: Database): Promise<{ release: () => Promise<void> }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const holding = new Promise<void>((resolve) => (locked = resolve));
  const transaction = db.transaction(async (tx) => {
    await tx.query('LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE');
    locked();
    await released;
  });
  await Promise.race([holding, transaction]);
  return {
    release: async () => {
      release();
      await transaction;
    },
  };
}

/**
 * Sends `request` (raw HTTP, as written) on a connection of its own and closes the connection as
 * soon as the app has the request: a client that hangs up. Resolves once the app has seen it close.
 */
export async function hangUpOnceReceived(app: FastifyInstance, port: number, request: string): Promise<void> {
  const received = new Promise<{ closed: Promise<unknown> }>((resolve) =>
    app.server.once('request', (_request, response: ServerResponse) =>
      resolve({ closed: new Promise((closed) => response.once('close', closed)) }),
    ),
  );
  const client = await openSocket(port);
  client.socket.write(request);
  const { closed } = await received;
  client.socket.destroy();
  await closed;
}

/** A GET of a page of pets with a key's Authorization header, as raw HTTP. */
export const rawGet = (headers: { authorization: string }) =>
  `GET /v1/pets?limit=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${headers.authorization}\r\n\r\n`;
