import type { FastifyInstance } from 'fastify';
import { domainError } from '../domain-errors.js';

/** A port that cannot be had: the process gives up before serving, with one line naming the setting. */
export const LISTEN_CODE = 'PETSTORE_LISTEN';

/** Thrown with the host, the port, why, and the setting that names the port; its cause is Node's error. */
export const ListenError = domainError(LISTEN_CODE, 'Cannot listen on %s:%s: %s. Set %s to a free port.');

/** Why a port cannot be had, by Node's code; any other failure is no ListenError. */
const REASONS: Partial<Record<string, string>> = {
  EADDRINUSE: 'the port is in use (another instance?)',
  EACCES: 'permission denied',
  EADDRNOTAVAIL: 'no such address here',
};

/** Listens on `host:port`; a ListenError naming `setting` when the port cannot be had. */
export async function listenOn(server: FastifyInstance, port: number, host: string, setting: string) {
  try {
    await server.listen({ port, host });
  } catch (error) {
    const reason = REASONS[(error as NodeJS.ErrnoException).code ?? ''];
    if (!reason) throw error;
    throw new ListenError(host, port, reason, setting, { cause: error });
  }
}
