import fp from 'fastify-plugin';
import { Gauge } from 'prom-client';
import type { Database } from '../db/database.js';
import { openDatabase } from '../db/open.js';
import { migrate } from '../db/migrate.js';
import { createApiKeysRepository, type ApiKeysRepository } from '../repositories/api-keys.js';
import { createPetsRepository, type PetsRepository } from '../repositories/pets.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: Database;
    pets: PetsRepository;
    apiKeys: ApiKeysRepository;
  }
}

/**
 * Opens the database the configuration names, brings its schema up to date, and makes it and
 * its repositories available to routes; closes it with the app.
 */
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
    if (db.poolStats) {
      const stats = db.poolStats.bind(db);
      new Gauge({
        name: 'db_pool_connections',
        help: 'PostgreSQL pool connections in use and idle, and requests waiting for one',
        labelNames: ['state'] as const,
        registers: [app.metricsRegistry],
        collect() {
          const { total, idle, waiting } = stats();
          this.set({ state: 'in_use' }, total - idle);
          this.set({ state: 'idle' }, idle);
          this.set({ state: 'waiting' }, waiting);
        },
      });
    }
    app.decorate('pets', createPetsRepository(db));
    app.decorate('apiKeys', createApiKeysRepository(db));
    app.addHook('onClose', () => db.close());
  },
  { name: 'database', dependencies: ['metrics'] },
);
