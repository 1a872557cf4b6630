import { Type } from '@sinclair/typebox';

/**
 * A web origin as a browser sends it in `Origin` (RFC 6454): `scheme://host[:port]`, lowercase, no
 * path and no default port. Compared exactly, so anything a browser would write otherwise is refused
 * (originProblem) rather than stored to never match.
 */
export const Origin = Type.String({
  minLength: 1,
  maxLength: 300,
  pattern: '^[a-z][a-z0-9+.-]*://[^/?#@\\s]+$',
  examples: ['https://shop.example.com', 'http://localhost:5173'],
  description: 'A web origin, `scheme://host[:port]`, exactly as browsers send it in `Origin`',
  'x-error-message': 'must be a web origin, scheme://host[:port], as browsers send it in Origin',
});

/** Why `value` is not an origin as a browser would send it, naming the form it would have; undefined when it is. */
export function originProblem(value: string): string | undefined {
  const url = URL.canParse(value) ? new URL(value) : undefined;
  const origin = url?.origin;
  if (!url || origin === undefined || origin === 'null') return `${JSON.stringify(value)} is not a web origin (scheme://host[:port])`;
  if (origin !== value) return `${JSON.stringify(value)} is not an origin as browsers send it; write ${JSON.stringify(origin)}`;
  return undefined;
}
