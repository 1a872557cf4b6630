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
    const db = await openDatabase(config);
    try {
      await migrate(db);
    } catch (error) {
      await db.close();
      throw error;
    }
    app.decorate('db', db);
    app.addHook('onClose', () => db.close());
  },
  { name: 'database' },
);
