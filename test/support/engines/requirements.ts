import { describe } from 'vitest';
import { POSTGRES_URL } from '../databases.js';
import { PRIVATE_POSTGRES_AVAILABLE } from '../postgres-server.js';
import { findProgram } from './daemon.js';

const INSTALL = 'bash .ci/install-engines.sh';
const installed = (program: string, ...others: string[]) =>
  [program, ...others].every((name) => findProgram(name)) ? undefined : `${program} not installed: ${INSTALL}`;

/** What the engine tests need: undefined where this machine has it, else why a test needing it is skipped. */
export const NEEDS = {
  redisServer: installed('redis-server', 'redis-cli'),
  pgbouncer: installed('pgbouncer'),
  nginx: installed('nginx'),
  openssl: installed('openssl'),
  privatePostgres: PRIVATE_POSTGRES_AVAILABLE
    ? undefined
    : 'no private PostgreSQL server: initdb and postgres not found (POSTGRES_BIN_DIR, /usr/lib/postgresql/N/bin), or root without a postgres user',
  postgresUrl: POSTGRES_URL ? undefined : 'DATABASE_URL not set: the instances share a PostgreSQL database',
};

/** `describe`, or, when something its tests need is missing, a skipped describe whose name says what. */
export function describeNeeding(...needs: Array<string | undefined>): (name: string, body: () => void) => void {
  const missing = needs.filter((need) => need !== undefined);
  if (missing.length === 0) return describe;
  return (name, body) => describe.skip(`${name} (skipped: ${missing.join('; ')})`, body);
}
