import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { SECURITY_SCHEME } from './auth.js';

/**
 * The OpenAPI document is generated from the route schemas themselves; it lists the /v1
 * operations (those under apiPrefix) relative to the public base URL, as the interface does.
 */
export default fp<{ publicBaseUrl: string; apiPrefix: string }>(
  async function openapi(app, { publicBaseUrl, apiPrefix }) {
    await app.register(swagger, {
      openapi: {
        openapi: '3.0.3',
        info: {
          title: 'Pet store',
          version: '1.0.0',
          description:
            'Browse and manage the animals available for adoption. Every error is an `Error` body ' +
            '`{code, message, status}`; see the README for the codes and the decisions this service takes.',
        },
        servers: [{ url: publicBaseUrl }],
        tags: [{ name: 'pets', description: 'Animals available for adoption' }],
        components: {
          securitySchemes: {
            [SECURITY_SCHEME]: {
              type: 'http',
              scheme: 'bearer',
              description: 'An API key, sent as `Authorization: Bearer <API key>`. See the README for how keys are issued.',
            },
          },
        },
      },
      transform: ({ schema, url }) => ({
        schema: url.startsWith(`${apiPrefix}/`) ? schema : { ...schema, hide: true },
        url: url.slice(apiPrefix.length),
      }),
    });
    await app.register(swaggerUi, { routePrefix: '/docs' });
  },
  { name: 'openapi' },
);
