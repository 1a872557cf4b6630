import fp from 'fastify-plugin';
import type { Database } from '../db/database.js';
import { migrate } from '../db/migrate.js';
import { openDatabase } from '../db/open.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: Database;
  }
}

/** Opens the database the configuration names, brings its schema up to date, and closes it with the app. */
export default fp<Parameters<typeof openDatabase>[0]>(
  async function database(app, config) {
    // The embedded engine's first start creates its data directory, the slowest step of a first start.
    if (!config.DATABASE_URL) app.log.info({ dataDir: config.DATA_DIR }, 'opening the embedded database');
    const db = await openDatabase(config);
    try {
      const applied = await migrate(db);
      if (applied.length > 0) app.log.info({ migrations: applied }, 'database schema brought up to date');
    } catch (error) {
      await db.close();
      throw error;
    }
    app.decorate('db', db);
    app.addHook('onClose', () => db.close());
  },
  { name: 'database' },
);
