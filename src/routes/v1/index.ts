import type { FastifyPluginAsync } from 'fastify';
import auth from '../../plugins/auth.js';
import pets from './pets.js';

export const API_PREFIX = '/v1';

/** Everything under /v1: the pets operations, behind bearer auth, and the public OpenAPI document. */
const v1: FastifyPluginAsync = async (app) => {
  await app.register(auth);
  app.get('/openapi.json', { schema: { hide: true }, config: { public: true } }, async () => app.swagger());
  await app.register(pets);
};

export default v1;
