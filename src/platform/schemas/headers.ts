import { Type } from '@sinclair/typebox';

/**
 * Idempotency-Key (draft-ietf-httpapi-idempotency-key-header-07): a structured-field string, as
 * the draft writes it, or the same characters bare, as Stripe's clients send them; `"a-1"` and
 * `a-1` name one key. Either way 1 to 255 visible ASCII characters once unquoted (inside quotes,
 * `\"` and `\\` stand for `"` and `\`).
 */
export const IdempotencyKey = Type.String({
  pattern: '^(?:"(?:[\\x21\\x23-\\x5b\\x5d-\\x7e]|\\\\["\\\\]){1,255}"|[\\x21\\x23-\\x7e][\\x21-\\x7e]{0,254})$',
  description:
    'Makes the request safe to retry: a retry with the same key gets the first response again, with `Idempotent-Replayed: true`, ' +
    'instead of adding a second animal. 1 to 255 visible ASCII characters, bare (`a-1`) or as a structured-field string (`"a-1"`), ' +
    'which name the same key. Keys belong to the API key that sent them.',
  'x-error-message': 'must be 1 to 255 visible ASCII characters, bare or as a quoted string',
});

/** The key an Idempotency-Key header names: the value unquoted and unescaped. */
export const idempotencyKeyOf = (header: string) => (header.startsWith('"') ? header.slice(1, -1).replace(/\\(.)/g, '$1') : header);

/** If-None-Match (RFC 9110): `*`, or a list of entity tags. */
export const IfNoneMatch = Type.String({
  description:
    'Entity tags of representations the client holds, or `*`; when one matches the current `ETag`, the answer is 304 without a body',
});
