import { Type, type TObject, type TSchema } from '@sinclair/typebox';

export type ResponseSchemas = Record<string, TSchema & { headers?: object }>;
type HeaderDocs = Record<string, { type: 'string' | 'integer'; description: string }>;

/**
 * Adds headers to the documentation of every response of a route: plugins that put a header
 * on every response (rate limiting, deprecation) say so in the OpenAPI document this way.
 */
export function withHeaders(responses: ResponseSchemas | undefined, headers: HeaderDocs): ResponseSchemas {
  return Object.fromEntries(
    Object.entries(responses ?? {}).map(([status, schema]) => [status, { ...schema, headers: { ...schema.headers, ...headers } }]),
  );
}

/** Adds optional request headers to a route's headers schema: validated, and documented as header parameters. */
export function withRequestHeaders(headers: TSchema | undefined, added: Record<string, TSchema>): TObject {
  const properties = Object.fromEntries(Object.entries(added).map(([name, schema]) => [name, Type.Optional(schema)]));
  return Type.Object({ ...(headers as TObject | undefined)?.properties, ...properties });
}
