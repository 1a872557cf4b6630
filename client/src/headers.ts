// What the client reads from the service's response headers.

/** The rate limit as the last answer stated it. */
export interface RateLimit {
  /** Requests allowed in the binding window (of the key's windows, the one with the fewest left, or the last to have room again). */
  limit: number;
  /** Requests left in it after that request. */
  remaining: number;
  /** When it resets (for a ban: when the ban ends), by the service's clock. */
  reset: Date;
}

const integer = (value: string | null) => (value !== null && /^\d+$/.test(value.trim()) ? Number(value) : undefined);

/** X-RateLimit-Limit, -Remaining and -Reset (Unix seconds), when the answer has all three. */
export function rateLimitOf(headers: Headers): RateLimit | undefined {
  const limit = integer(headers.get('x-ratelimit-limit'));
  const remaining = integer(headers.get('x-ratelimit-remaining'));
  const reset = integer(headers.get('x-ratelimit-reset'));
  if (limit === undefined || remaining === undefined || reset === undefined) return undefined;
  return { limit, remaining, reset: new Date(reset * 1000) };
}

/**
 * How far the service's clock is ahead of this one, from the answer's `Date`, so that the
 * service's absolute times (X-RateLimit-Reset) are waited for by its clock, not by a skewed local
 * one. `Date` has whole seconds and is cut down, so the estimate errs towards waiting longer.
 */
export function clockOffsetMs(headers: Headers, receivedAt: number): number {
  const date = Date.parse(headers.get('date') ?? '');
  return Number.isNaN(date) ? 0 : date - receivedAt;
}

/** Retry-After in milliseconds: seconds, or an HTTP date read by the service's clock. */
export function retryAfterMs(headers: Headers, offsetMs: number, now: number): number | undefined {
  const value = headers.get('retry-after')?.trim();
  if (!value) return undefined;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - offsetMs - now);
}

/** The targets of an RFC 8288 Link header by relation type, as written (resolve them with urlOf). */
export function linksOf(headers: Headers): Map<string, string> {
  const links = new Map<string, string>();
  for (const [, target, params] of (headers.get('link') ?? '').matchAll(/<([^>]*)>([^,]*)/g)) {
    const rel = /;\s*rel\s*=\s*(?:"([^"]*)"|([^\s;"]+))/i.exec(params!);
    for (const type of (rel?.[1] ?? rel?.[2] ?? '').toLowerCase().split(/\s+/).filter(Boolean)) {
      if (!links.has(type)) links.set(type, target!);
    }
  }
  return links;
}

/** `target` resolved against `base`, or undefined when it is not a URL. */
export function urlOf(target: string, base: string): URL | undefined {
  try {
    return new URL(target, base);
  } catch {
    return undefined;
  }
}

/** What a deprecated operation's answer says of it (RFC 9745 Deprecation, RFC 8594 Sunset). */
export interface DeprecationNotice {
  /** The client's name of the operation, as `getPet`. */
  operation: string;
  /** Since when it is deprecated, when the header gives a date (`@<Unix seconds>`). */
  deprecation: Date | undefined;
  /** When it is removed; from then on it answers 410 `gone`. */
  sunset: Date | undefined;
  /** The page about the deprecation (Link rel="deprecation"), else the operation to use instead (rel="successor-version"). */
  link: string | undefined;
}

/** The notice of an answer that carries `Deprecation` or `Sunset`, else undefined. */
export function deprecationOf(operation: string, headers: Headers, base: string): DeprecationNotice | undefined {
  const deprecation = headers.get('deprecation');
  const sunset = headers.get('sunset');
  if (deprecation === null && sunset === null) return undefined;
  const since = /^@(-?\d+)$/.exec(deprecation?.trim() ?? '');
  const sunsetAt = Date.parse(sunset ?? '');
  const links = linksOf(headers);
  const link = links.get('deprecation') ?? links.get('successor-version');
  return {
    operation,
    deprecation: since ? new Date(Number(since[1]) * 1000) : undefined,
    sunset: Number.isNaN(sunsetAt) ? undefined : new Date(sunsetAt),
    link: link === undefined ? undefined : urlOf(link, base)?.href,
  };
}
