import type { FastifyPluginAsync } from 'fastify';
import pets from './pets.js';

export const API_PREFIX = '/v1';

/** Everything under /v1: the pets operations and the OpenAPI document. */
const v1: FastifyPluginAsync = async (app) => {
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  await app.register(pets);
};

export default v1;
