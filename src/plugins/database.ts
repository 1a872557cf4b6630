import fp from 'fastify-plugin';
import type { Database } from '../db/database.js';
import { createApiKeysRepository, type ApiKeysRepository } from '../repositories/api-keys.js';
import { createPetsRepository, type PetsRepository } from '../repositories/pets.js';

declare module 'fastify' {
  interface FastifyInstance {
    db: Database;
    pets: PetsRepository;
    apiKeys: ApiKeysRepository;
  }
}

/** Makes the database and its repositories available to routes; closes it with the app. */
export default fp<{ db: Database }>(
  async function database(app, { db }) {
    app.decorate('db', db);
    app.decorate('pets', createPetsRepository(db));
    app.decorate('apiKeys', createApiKeysRepository(db));
    app.addHook('onClose', () => db.close());
  },
  { name: 'database' },
);
