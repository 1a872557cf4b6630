import type { Database } from './database.js';

/** PostgreSQL when a URL is given, otherwise the embedded engine on its data directory. */
export async function openDatabase(config: {
  DATABASE_URL?: string;
  DATABASE_LISTEN_URL?: string;
  DATABASE_PREPARED_STATEMENTS?: boolean;
  DATA_DIR: string;
  DB_POOL_SIZE: number;
}): Promise<Database> {
  if (config.DATABASE_URL) {
    const { createPostgresDatabase } = await import('./postgres.js');
    return createPostgresDatabase({
      connectionString: config.DATABASE_URL,
      listenConnectionString: config.DATABASE_LISTEN_URL,
      preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
      max: config.DB_POOL_SIZE,
    });
  }
  const { createPgliteDatabase } = await import('./pglite.js');
  return createPgliteDatabase(config.DATA_DIR);
}
