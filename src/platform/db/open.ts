import { NoEmbeddedDatabaseError } from '../config/errors.js';
import type { Database } from './database.js';
import type { EmbeddedOptions } from './pglite.js';

/** PostgreSQL when a URL is given, otherwise the embedded engine on its data directory. */
export async function openDatabase(
  config: {
    DATABASE_URL?: string;
    DATABASE_LISTEN_URL?: string;
    DATABASE_PREPARED_STATEMENTS?: boolean;
    DATA_DIR: string;
    DB_POOL_SIZE: number;
  },
  embedded: EmbeddedOptions = {},
): Promise<Database> {
  if (config.DATABASE_URL) {
    const { createPostgresDatabase } = await import('./postgres.js');
    return createPostgresDatabase({
      connectionString: config.DATABASE_URL,
      listenConnectionString: config.DATABASE_LISTEN_URL,
      preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
      max: config.DB_POOL_SIZE,
    });
  }
  const { createPgliteDatabase } = await import('./pglite.js').catch((error: NodeJS.ErrnoException) => {
    // PGlite is an optional dependency: the container image leaves it out (npm ci --omit=optional).
    if (error.code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new NoEmbeddedDatabaseError({ cause: error });
  });
  return createPgliteDatabase(config.DATA_DIR, embedded);
}
