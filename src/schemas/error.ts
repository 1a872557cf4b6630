import { Type, type Static } from '@sinclair/typebox';

/** The stable, documented set of machine-readable error codes. */
export const ERROR_CODES = [
  'bad_request',
  'unauthorized',
  'forbidden',
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
