import { PGlite, type Transaction as PgliteTransaction } from '@electric-sql/pglite';
import type { Database, Queryable } from './database.js';

/**
 * PostgreSQL compiled to WASM, in this process: the zero-install default. It holds one
 * connection and admits one process per data directory, so it is never shared over a socket.
 */
export async function createPgliteDatabase(dataDir: string): Promise<Database> {
  const db = await PGlite.create(dataDir);
  return {
    kind: 'pglite',
    query: queryOn(db),
    transaction: (work) =>
      db.transaction((tx) => work({ query: queryOn(tx), runScript: async (sql) => void (await tx.exec(sql)) })),
    close: () => db.close(),
  };
}

const queryOn =
  (target: PGlite | PgliteTransaction): Queryable['query'] =>
  async <Row>(statement: { text: string } | string, params: readonly unknown[] = []) => {
    const text = typeof statement === 'string' ? statement : statement.text;
    return (await target.query<Row>(text, params as unknown[])).rows;
  };
