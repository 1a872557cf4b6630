import type { TSchema } from '@sinclair/typebox';
import type { RouteOptions } from 'fastify';
import { SERVICE_FAILURE_RESPONSES } from '../platform/errors.js';
import { REQUEST_ID_RESPONSE_HEADERS } from '../platform/http/request-id.js';
import { documentIdempotency } from '../idempotency/plugin.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { withHeaders, type ResponseSchemas } from '../platform/schemas/responses.js';
import { ADMIN_SECURITY_SCHEME } from './auth.js';

const WWW_AUTHENTICATE = { 'www-authenticate': { type: 'string', description: 'Bearer realm="pets-admin" (RFC 6750)' } } as const;

/**
 * What the admin listener adds to every operation's declared responses (the features'
 * admin-routes.ts): the admin token (401, and 403 for a read token on an operation that writes),
 * the Idempotency-Key of the create, and the request id on every response.
 */
export function documentAdminOperation(route: RouteOptions, { retentionHours }: { retentionHours: number }) {
  const schema = route.schema;
  if (!schema || schema.hide) return;
  const config = route.config ?? {};
  let responses = schema.response as ResponseSchemas;
  let headers = schema.headers as TSchema | undefined;
  if (!config.public) {
    schema.security = [{ [ADMIN_SECURITY_SCHEME]: [] }];
    responses = {
      ...responses,
      401: { ...ErrorBody, description: 'Admin token missing, invalid or revoked (`unauthorized`)', headers: WWW_AUTHENTICATE },
      ...(config.writes && {
        403: { ...ErrorBody, description: 'The admin token has the read scope (`forbidden`)', headers: WWW_AUTHENTICATE },
      }),
    };
  }
  if (config.idempotent) ({ headers, responses } = documentIdempotency(headers, responses, retentionHours));
  schema.response = withHeaders({ ...responses, ...SERVICE_FAILURE_RESPONSES }, REQUEST_ID_RESPONSE_HEADERS);
  if (headers) schema.headers = headers;
}
