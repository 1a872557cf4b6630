import { Type, type Static } from '@sinclair/typebox';

/** The stable, documented set of machine-readable error codes. */
export const ERROR_CODES = [
  'bad_request',
  'unauthorized',
  'forbidden',
  'cost_exceeds_limit',
  'origin_not_allowed',
  'not_found',
  'method_not_allowed',
  'request_timeout',
  'idempotency_key_in_use',
  'conflict',
  'gone',
  'payload_too_large',
  'unsupported_media_type',
  'idempotency_key_mismatch',
  'headers_too_large',
  'rate_limited',
  'api_key_banned',
  'concurrency_limited',
  'credits_exhausted',
  'internal_error',
  'service_unavailable',
] as const;

export const ErrorBody = Type.Object(
  {
    code: Type.Unsafe<(typeof ERROR_CODES)[number]>(Type.String({ enum: [...ERROR_CODES], description: 'Machine-readable error code' })),
    message: Type.String({ description: 'Human-readable description' }),
    status: Type.Integer({ description: 'The HTTP status code, repeated' }),
  },
  { title: 'Error' },
);
export type ErrorBody = Static<typeof ErrorBody>;
export type ErrorCode = ErrorBody['code'];

/** What an error status means, for the documented responses whose route says nothing more specific. */
export const ERROR_STATUS_DESCRIPTIONS: Readonly<Record<string, string>> = {
  400: 'The request is invalid (`bad_request`); the message names each field at fault and what it must be',
  404: 'Nothing has this id (`not_found`)',
  409: 'The change conflicts with the current state (`conflict`)',
  410: 'The operation has been removed (`gone`); the message names its successor',
  413: 'The body is larger than the service accepts (`payload_too_large`)',
  415: 'The body is not `application/json` (`unsupported_media_type`)',
};
