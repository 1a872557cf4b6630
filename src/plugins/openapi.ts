import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';

export interface OpenApiOptions {
  info: { title: string; version: string; description: string };
  /** The base URL the paths are relative to, as the document says (`servers`). */
  serverUrl: string;
  /** Routes under this prefix are the document's operations, listed without it; the rest are hidden. */
  apiPrefix: string;
  tags: Array<{ name: string; description: string }>;
  /** The bearer scheme every non-public operation names (set on each by its contract). */
  securityScheme: { name: string; description: string };
}

/**
 * The OpenAPI document generated from the route schemas themselves, and the docs page at /docs:
 * the public API's (/v1, relative to the public base URL, as the interface does) and the admin
 * API's, each on its own server.
 */
export default fp<OpenApiOptions>(
  async function openapi(app, { info, serverUrl, apiPrefix, tags, securityScheme }) {
    await app.register(swagger, {
      openapi: {
        openapi: '3.0.3',
        info,
        servers: [{ url: serverUrl }],
        tags,
        components: {
          securitySchemes: { [securityScheme.name]: { type: 'http', scheme: 'bearer', description: securityScheme.description } },
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
