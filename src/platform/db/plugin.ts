import fp from 'fastify-plugin';
import type { Database } from './database.js';
import { migrate } from './migrate.js';
import { openDatabase } from './open.js';
import { createReplicaReads, type ReplicaReads } from './replicas.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: Database;
    /** With DATABASE_REPLICA_URLS: where reads of pets go, a replica that has replayed every change known here or the primary. */
    replicaReads: ReplicaReads | undefined;
  }
}

export type DatabaseOptions = Parameters<typeof openDatabase>[0] & {
  databaseReplicaUrls: string[];
  DATABASE_REPLICA_MAX_LAG_MS: number;
  DATABASE_REPLICA_TIMEOUT_MS: number;
};

/** Opens the database the configuration names, brings its schema up to date, and closes it with the app. */
export default fp<DatabaseOptions>(
  async function database(app, config) {
    // The embedded engine's first start creates its data directory, the slowest step of a first start.
    if (!config.DATABASE_URL) app.log.info({ dataDir: config.DATA_DIR }, 'opening the embedded database');
    const db = await openDatabase(config);
    try {
      const applied = await migrate(db);
      app.log.info({ migrations: applied }, applied.length > 0 ? 'database schema brought up to date' : 'database schema is current');
    } catch (error) {
      await db.close();
      throw error;
    }
    app.decorate('db', db);
    app.addHook('onClose', () => db.close());
    const replicaReads =
      config.databaseReplicaUrls.length > 0
        ? createReplicaReads(db, {
            urls: config.databaseReplicaUrls,
            maxLagMs: config.DATABASE_REPLICA_MAX_LAG_MS,
            timeoutMs: config.DATABASE_REPLICA_TIMEOUT_MS,
            log: app.log,
            preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
            max: config.DB_POOL_SIZE,
          })
        : undefined;
    if (replicaReads) app.addHook('onClose', () => replicaReads.close());
    app.decorate('replicaReads', replicaReads);
  },
  { name: 'database' },
);
