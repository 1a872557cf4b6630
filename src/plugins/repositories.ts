import fp from 'fastify-plugin';
import { createApiKeysRepository, type ApiKeysRepository } from '../repositories/api-keys.js';
import { createPetsRepository, type PetsRepository } from '../repositories/pets.js';

declare module 'fastify' {
  interface FastifyInstance {
    petsRepository: PetsRepository;
    apiKeysRepository: ApiKeysRepository;
  }
}

/** The repositories over the app's database: what routes and plugins read and write through. */
export default fp(
  async function repositories(app) {
    app.decorate('petsRepository', createPetsRepository(app.db));
    app.decorate('apiKeysRepository', createApiKeysRepository(app.db));
  },
  { name: 'repositories', dependencies: ['database'] },
);
