/** `Bearer <token>`; the scheme is case-insensitive (RFC 7235), spaces around the token are not part of it. */
const BEARER = /^Bearer +(.*)$/i;

/**
 * The token of an Authorization header of the Bearer scheme, or undefined when there is none (no
 * header, another scheme, or an empty token): both listeners answer that as credentials missing.
 */
export const bearerToken = (authorization: string | undefined): string | undefined =>
  BEARER.exec(authorization ?? '')?.[1]?.trim() || undefined;
