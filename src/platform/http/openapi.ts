import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifySchema } from 'fastify';
import { ERROR_STATUS_DESCRIPTIONS } from '../schemas/error.js';

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
        schema: url.startsWith(`${apiPrefix}/`) ? (withNullable(describeErrors(schema)) as FastifySchema) : { ...schema, hide: true },
        url: url.slice(apiPrefix.length),
      }),
    });
    await app.register(swaggerUi, {
      routePrefix: '/docs',
      theme: { title: info.title },
      // The key pasted into "Authorize" stays across reloads (in the browser's local storage).
      uiConfig: { persistAuthorization: true },
    });
  },
  { name: 'openapi' },
);

/** The response headers an OpenAPI document names on any of its operations, each once, in lower case. */
export function documentedResponseHeaders(document: { paths?: Record<string, object | undefined> }): string[] {
  const names = new Set<string>();
  for (const operations of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(operations ?? {}) as Array<{ responses?: Record<string, { headers?: object }> }>) {
      for (const response of Object.values(operation.responses ?? {})) {
        for (const name of Object.keys(response.headers ?? {})) names.add(name.toLowerCase());
      }
    }
  }
  return [...names].sort();
}

/** Error responses a route declares without a description get their status's, not "Default Response". */
function describeErrors(schema: FastifySchema): FastifySchema {
  const responses = schema.response as Record<string, { description?: string }> | undefined;
  if (!responses) return schema;
  const described = Object.entries(responses).map(([status, response]) => [
    status,
    response.description || !ERROR_STATUS_DESCRIPTIONS[status] ? response : { ...response, description: ERROR_STATUS_DESCRIPTIONS[status] },
  ]);
  return { ...schema, response: Object.fromEntries(described) };
}

/**
 * OpenAPI 3.0 has no null type: a schema that is a union of one type and null (TypeBox's
 * `Type.Union([T, Type.Null()])`, which validation checks as written) is documented as that type, `nullable`.
 */
function withNullable(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withNullable);
  if (schema === null || typeof schema !== 'object') return schema;
  const { anyOf, ...rest } = Object.fromEntries(Object.entries(schema).map(([name, value]) => [name, withNullable(value)])) as {
    anyOf?: Array<{ type?: unknown }>;
  };
  const others = anyOf?.filter((member) => member.type !== 'null');
  if (!anyOf || others!.length !== 1 || anyOf.length !== 2) return anyOf ? { anyOf, ...rest } : rest;
  return { ...others![0], ...rest, nullable: true };
}
