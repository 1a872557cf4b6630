import { ConditionalCache, type HeldAnswer } from './conditional-cache.js';
import { ConnectionError, errorOf, PetStoreError, TimeoutError } from './errors.js';
import { clockOffsetMs, deprecationOf, linksOf, retryAfterMs, urlOf, type DeprecationNotice, type RateLimit } from './headers.js';
import { RateGate } from './rate-gate.js';
import type { NewPet, Pet, PetStatus, RateLimitStatus, ServiceErrorCode, UsageRow } from './types.js';
import { VERSION } from './version.js';
import { retryDelayMs, sleep } from './backoff.js';

/** What the client may be told to do per call as well as for every call. */
export interface RetryOptions {
  /** Retries of one call after a retryable failure (default 3): an integer, 0 or more. */
  maxRetries?: number;
  /** How long one attempt may take, answer body included (default 10 s); above 0. */
  timeoutMs?: number;
  /**
   * The longest wait the service may state (`Retry-After`, or the reset of a spent window) that the
   * client waits out (default 60 s); a longer one fails at once. The spread added to a stated wait
   * (up to 1 s) does not count.
   */
  maxWaitMs?: number;
}

export interface PetStoreClientOptions extends RetryOptions {
  /** The API's base address, ending in `/v1`, e.g. `https://pets.example.com/v1`. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>`, and nowhere else: no error or hook is shown it. */
  apiKey: string;
  /** The fetch to use (default: the platform's). */
  fetch?: typeof fetch;
  /** Conditional reads: keep the last answer of each read and revalidate it (`true`: up to 1,000 reads). */
  cache?: boolean | { maxEntries: number };
  /** Called once per deprecated operation the client calls (default: a warning, once). */
  onDeprecation?: (notice: DeprecationNotice) => void;
  /** Called as each attempt is sent. */
  onRequest?: (event: RequestEvent) => void;
  /** Called as each attempt's answer has come, before the client decides what to do with it. */
  onResponse?: (event: ResponseEvent) => void;
  /** Called before the client waits to retry a failed attempt. */
  onRetry?: (event: RetryEvent) => void;
  /** The User-Agent header (default `pet-store-client/<version>`; browsers may not send it). */
  userAgent?: string;
}

export interface CallOptions extends RetryOptions {
  /** Aborting it stops the call at once, whatever it is waiting for; it rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Headers sent with each attempt of this call besides the client's; `Authorization` is refused. */
  headers?: Record<string, string>;
}

export interface ListOptions extends CallOptions {
  /** Only animals with this status. */
  status?: PetStatus;
  /** Animals per page, 1 to 100 (the service's default: 20). */
  limit?: number;
  /** Where to start: a page's `nextCursor` (default: the first page). */
  cursor?: string;
}

export interface CreateOptions extends CallOptions {
  /**
   * The create's Idempotency-Key, 1 to 255 visible ASCII characters (default: a new random UUID
   * per call); sent unchanged on every retry.
   */
  idempotencyKey?: string;
}

export interface UsageOptions extends CallOptions {
  /** The first bucket's start, inclusive: a whole hour (UTC), or 00:00 UTC of a day with `granularity: 'day'`. */
  start: Date | string;
  /** The end of the range, exclusive, after `start` and as whole. */
  end: Date | string;
  /** The buckets: hours (the service's default) or UTC days. */
  granularity?: 'hour' | 'day';
  /** Whose usage: the key's own (the service's default), or all its customer's keys' together. */
  scope?: 'key' | 'customer';
  /** A row per operation in each bucket, instead of one for all. */
  groupBy?: 'operation';
}

/** One page of a listing. */
export interface Page {
  pets: Pet[];
  /** The cursor of the next page (`listPetsPage({ cursor })`), undefined on the last page. */
  nextCursor: string | undefined;
  /** The answer's `X-Request-Id`. */
  requestId: string | undefined;
}

export type Operation = 'listPets' | 'createPet' | 'getPet' | 'getRateLimit' | 'getUsage';

/** What the hooks are told of an attempt; never a header. */
export interface RequestEvent {
  operation: Operation;
  method: 'GET' | 'POST';
  url: string;
  /** 1 for a call's first request, 2 for its first retry, ... */
  attempt: number;
}

export interface ResponseEvent extends RequestEvent {
  status: number;
  /** The answer's `X-Request-Id`. */
  requestId: string | undefined;
  /** From sending to the whole body read. */
  durationMs: number;
}

export interface RetryEvent extends RequestEvent {
  /** How long the client waits before the next attempt. */
  delayMs: number;
  /** Why attempt `attempt` failed. */
  reason: PetStoreError;
}

const DEFAULTS = { maxRetries: 3, timeoutMs: 10_000, maxWaitMs: 60_000, cacheEntries: 1_000 };

/** A header value the platform's fetch sends as given (no control character, no space at either end). */
const HEADER_VALUE = /^(?:[\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What the service takes as an Idempotency-Key written bare. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/** What is retried (README: "What it retries"): these statuses whatever the body, and no answer at all. */
const RETRIED_STATUSES = new Set([408, 429, 500, 502, 503, 504]);

type Limits = Required<RetryOptions>;

interface Call {
  operation: Operation;
  method: 'GET' | 'POST';
  url: string;
  body?: string;
  idempotencyKey?: string;
  signal: AbortSignal | undefined;
  headers: Record<string, string>;
  limits: Limits;
  /** Spends nothing of the key's windows: sent without waiting for the rate gate. */
  free?: boolean;
}

/** A call's answer: its body (a held copy's for a 304) and headers. */
interface Answer {
  body: unknown;
  headers: Headers;
}

/** No answer within timeoutMs, told apart from the caller's own abort. */
class AttemptTimeout extends Error {}

/**
 * The pet store API's client. One instance per API key: it keeps that key's rate limit, held
 * copies of reads and the deprecations already reported, for every call made through it.
 */
export class PetStoreClient {
  readonly #baseUrl: string;
  readonly #headers: Record<string, string>;
  readonly #limits: Limits;
  readonly #fetch: typeof fetch;
  readonly #cache: ConditionalCache | undefined;
  readonly #onDeprecation: (notice: DeprecationNotice) => void;
  readonly #hooks: Pick<PetStoreClientOptions, 'onRequest' | 'onResponse' | 'onRetry'>;
  readonly #deprecationsReported = new Set<Operation>();
  readonly #gate = new RateGate();

  constructor(options: PetStoreClientOptions) {
    const baseUrl = String(options.baseUrl).replace(/\/+$/, '');
    if (!/^https?:\/\/[^/]+(\/.*)?\/v1$/.test(baseUrl) || !urlOf(baseUrl, baseUrl)) {
      throw new TypeError(`baseUrl must be the API's http(s) address ending in /v1, got ${JSON.stringify(options.baseUrl)}`);
    }
    // Checked here, never echoed: fetch's own refusal quotes the whole header, key included.
    if (typeof options.apiKey !== 'string' || !/^[\x21-\x7e]+$/.test(options.apiKey)) {
      throw new TypeError('apiKey must be a non-empty string of visible ASCII characters (it is sent in the Authorization header)');
    }
    this.#baseUrl = baseUrl;
    this.#headers = {
      authorization: `Bearer ${options.apiKey}`,
      accept: 'application/json',
      'user-agent': options.userAgent ?? `pet-store-client/${VERSION}`,
    };
    this.#limits = limitsOf(options, DEFAULTS);
    // Bound: a platform fetch called as a method of another object throws in browsers.
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    const cache = options.cache === true ? { maxEntries: DEFAULTS.cacheEntries } : options.cache || undefined;
    this.#cache = cache ? new ConditionalCache(cache.maxEntries) : undefined;
    this.#onDeprecation = options.onDeprecation ?? warnOfDeprecation;
    this.#hooks = { onRequest: options.onRequest, onResponse: options.onResponse, onRetry: options.onRetry };
  }

  /** The rate limit the last answer stated (undefined before the first). */
  get rateLimit(): RateLimit | undefined {
    return this.#gate.last;
  }

  /** One page of animals, in id order (the first `limit`, 20 by default, after `cursor`). allPets walks every page. */
  async listPets(options: ListOptions = {}): Promise<Pet[]> {
    return (await this.#call(this.#listCall(options, this.#listUrl(options)))).body as Pet[];
  }

  /**
   * One page of animals with the cursor of the next. A next link that is not a URL, or has no
   * cursor, is refused: `unexpected_response`.
   */
  async listPetsPage(options: ListOptions = {}): Promise<Page> {
    const url = this.#listUrl(options);
    const { body, headers } = await this.#call(this.#listCall(options, url));
    return { pets: body as Pet[], nextCursor: this.#nextCursor(headers, url), requestId: headers.get('x-request-id') ?? undefined };
  }

  /**
   * Every animal, in id order (after `cursor` when given), page after page as the service links
   * them (Link rel="next"). A walk returns each animal that existed when it began exactly once. A
   * page's animals are yielded before its next link is judged: a link without a cursor, or to a
   * cursor the walk was already given, ends the walk with `unexpected_response`.
   */
  async *allPets(options: ListOptions = {}): AsyncGenerator<Pet, void, undefined> {
    const walked = new Set<string>();
    let cursor = options.cursor;
    for (;;) {
      if (cursor !== undefined) walked.add(cursor);
      const url = this.#listUrl({ ...options, cursor });
      const { body, headers } = await this.#call(this.#listCall(options, url));
      yield* body as Pet[];
      cursor = this.#nextCursor(headers, url);
      if (cursor === undefined) return;
      if (walked.has(cursor)) throw refusedLink(headers, 'a next link back to a page already walked');
    }
  }

  /**
   * Adds an animal. Always sent with an Idempotency-Key (a new UUID unless one is given), so a
   * create whose answer was lost is retried safely: the service answers the retry with the first
   * create's 201 and adds no second animal.
   */
  async createPet(pet: NewPet, { idempotencyKey, ...options }: CreateOptions = {}): Promise<Pet> {
    if (idempotencyKey !== undefined && (typeof idempotencyKey !== 'string' || !IDEMPOTENCY_KEY.test(idempotencyKey))) {
      throw new TypeError('idempotencyKey must be a string of 1 to 255 visible ASCII characters');
    }
    const call = this.#callOf('createPet', 'POST', `${this.#baseUrl}/pets`, options);
    return (await this.#call({ ...call, body: JSON.stringify(pet), idempotencyKey: idempotencyKey ?? randomUuid() })).body as Pet;
  }

  /**
   * One animal by id; 404 `not_found` when there is none.
   * @deprecated The service removes this operation on 5 December 2030: use listPets (with its status filter).
   */
  async getPet(id: number, options: CallOptions = {}): Promise<Pet> {
    return (await this.#call(this.#callOf('getPet', 'GET', `${this.#baseUrl}/pets/${id}`, options))).body as Pet;
  }

  /**
   * The key's rate limits and what is left of them (GET /v1/rate_limit): its plan, each of its
   * windows (`windows`, shortest first, `{ name, limit, remaining, windowSeconds, resetAt }`; `minute`
   * and `day` for the windows so named), its requests in flight, its credits (`{ remaining, refillAt }`,
   * `refillAt` an ISO date-time string or null; `credits` null without any) and what each operation
   * costs. It spends nothing of any window, so it is sent at once, also while the client waits out a spent one; the
   * service answers it 60 times a minute per key.
   */
  async getRateLimit(options: CallOptions = {}): Promise<RateLimitStatus> {
    const call = this.#callOf('getRateLimit', 'GET', `${this.#baseUrl}/rate_limit`, options);
    return (await this.#call({ ...call, free: true })).body as RateLimitStatus;
  }

  /**
   * The key's own usage record (GET /v1/usage), or its customer's with `scope: 'customer'`: the
   * buckets from `start` to `end` that had usage (`{ start, operation?, requests, units, refused:
   * { rateLimited, concurrency, credits, banned } }`, `start` an ISO date-time string), every page
   * the service links followed, in order. Free like getRateLimit, so sent at once; the service
   * answers it 60 times (pages) a minute per key. A next link the walk cannot follow is `unexpected_response`.
   */
  async getUsage(options: UsageOptions): Promise<UsageRow[]> {
    const rows: UsageRow[] = [];
    const walked = new Set<string>();
    let cursor: string | undefined;
    for (;;) {
      const url = this.#usageUrl(options, cursor);
      const { body, headers } = await this.#call({ ...this.#callOf('getUsage', 'GET', url, options), free: true });
      rows.push(...(body as UsageRow[]));
      cursor = this.#nextCursor(headers, url);
      if (cursor === undefined) return rows;
      if (walked.has(cursor)) throw refusedLink(headers, 'a next link back to a page already walked');
      walked.add(cursor);
    }
  }

  #usageUrl({ start, end, granularity, scope, groupBy }: UsageOptions, cursor: string | undefined): string {
    const query = new URLSearchParams({ start: dateTimeOf('start', start), end: dateTimeOf('end', end) });
    if (granularity !== undefined) query.set('granularity', granularity);
    if (scope !== undefined) query.set('scope', scope);
    if (groupBy !== undefined) query.set('groupBy', groupBy);
    if (cursor !== undefined) query.set('cursor', cursor);
    return `${this.#baseUrl}/usage?${query}`;
  }

  #listUrl({ status, limit, cursor }: Pick<ListOptions, 'status' | 'limit' | 'cursor'>): string {
    const query = new URLSearchParams();
    if (limit !== undefined) query.set('limit', String(limit));
    if (status !== undefined) query.set('status', status);
    if (cursor !== undefined) query.set('cursor', cursor);
    return `${this.#baseUrl}/pets${query.size ? `?${query}` : ''}`;
  }

  #listCall(options: CallOptions, url: string): Call {
    return this.#callOf('listPets', 'GET', url, options);
  }

  /** The call's settings: the client's, overridden by the call's options (checked as the client's are). */
  #callOf(operation: Operation, method: Call['method'], url: string, { signal, headers = {}, ...limits }: CallOptions): Call {
    // Lower-cased, so that the client's own headers (set after them) replace rather than join them.
    const extra: Record<string, string> = {};
    for (const [name, value] of Object.entries(headers)) {
      if (!HEADER_NAME.test(name) || typeof value !== 'string' || !HEADER_VALUE.test(value)) {
        throw new TypeError(`headers: ${JSON.stringify(name)} is not a header name with a valid value`);
      }
      if (name.toLowerCase() === 'authorization') throw new TypeError('headers may not set Authorization: the client sends its apiKey');
      extra[name.toLowerCase()] = value;
    }
    return { operation, method, url, signal, headers: extra, limits: limitsOf(limits, this.#limits) };
  }

  /**
   * The cursor of the answer's next link: only the cursor, asked of this client's own listing
   * whatever address the link names (behind a proxy that rewrites Host, a service without
   * PUBLIC_BASE_URL names its upstream's), so the walk works and the key never leaves `baseUrl`.
   */
  #nextCursor(headers: Headers, requestUrl: string): string | undefined {
    const target = linksOf(headers).get('next');
    if (target === undefined) return undefined;
    const next = urlOf(target, requestUrl);
    if (!next) throw refusedLink(headers, 'a next link that is not a URL');
    const cursor = next.searchParams.get('cursor');
    if (!cursor) throw refusedLink(headers, 'a next link without a cursor');
    return cursor;
  }

  /** The call with its retries: each attempt through the rate gate, failures retried while they may be. */
  async #call(call: Call): Promise<Answer> {
    for (let attempt = 0; ; attempt++) {
      // A free call neither waits for the gate nor teaches it: a 429 of its own limit blocks no other call.
      const ticket = call.free ? undefined : await this.#gate.acquire(call.signal, call.limits.maxWaitMs);
      const event: RequestEvent = { operation: call.operation, method: call.method, url: call.url, attempt: attempt + 1 };
      const held = call.method === 'GET' ? this.#cache?.get(call.url) : undefined;
      let sent: Sent;
      try {
        this.#hooks.onRequest?.(event);
        sent = await this.#attempt(call, held);
      } catch (error) {
        if (ticket) this.#gate.settle(undefined, Date.now(), ticket);
        if (!(error instanceof ConnectionError || error instanceof TimeoutError)) throw error;
        await this.#retryOrThrow(call, event, error, undefined);
        continue;
      }
      const { response, text, receivedAt, durationMs } = sent;
      const answered = response.ok || response.status === 304;
      const statedWaitMs = answered ? undefined : retryAfterMs(response.headers, clockOffsetMs(response.headers, receivedAt), receivedAt);
      const failure = answered ? undefined : serviceError(response, text, statedWaitMs);
      if (ticket) this.#gate.settle(response, receivedAt, ticket, failure?.code);
      const requestId = response.headers.get('x-request-id') ?? undefined;
      this.#hooks.onResponse?.({ ...event, status: response.status, requestId, durationMs });
      this.#noticeDeprecation(call, response.headers);
      if (!failure) return this.#answer(call, response, text, held);
      await this.#retryOrThrow(call, event, failure, statedWaitMs);
    }
  }

  /**
   * Throws the failure unless it is retried (isRetried, attempts left, and no stated wait beyond
   * maxWaitMs: one the caller did not allow fails now rather than later); else waits to retry.
   */
  async #retryOrThrow(call: Call, event: RequestEvent, failure: PetStoreError, statedWaitMs: number | undefined): Promise<void> {
    if (!isRetried(call, failure) || event.attempt > call.limits.maxRetries) throw failure;
    if (statedWaitMs !== undefined && statedWaitMs > call.limits.maxWaitMs) throw failure;
    const delayMs = retryDelayMs(event.attempt - 1, statedWaitMs);
    this.#hooks.onRetry?.({ ...event, delayMs, reason: failure });
    await sleep(delayMs, call.signal);
  }

  /**
   * One request, its whole answer read within timeoutMs. No answer is a ConnectionError or a
   * TimeoutError; the caller's abort rejects with its reason.
   */
  async #attempt(call: Call, held: HeldAnswer | undefined): Promise<Sent> {
    // The client's own headers last: a call's extra headers cannot replace them.
    const headers: Record<string, string> = { ...call.headers, ...this.#headers };
    if (call.body !== undefined) headers['content-type'] = 'application/json';
    if (call.idempotencyKey !== undefined) headers['idempotency-key'] = call.idempotencyKey;
    if (held) headers['if-none-match'] = held.etag;
    const timeout = new AbortController();
    const timerStop = new AbortController();
    sleep(call.limits.timeoutMs, timerStop.signal).then(
      () => timeout.abort(new AttemptTimeout()),
      () => {},
    );
    const signal = call.signal ? AbortSignal.any([call.signal, timeout.signal]) : timeout.signal;
    const sentAt = performance.now();
    try {
      const fetchOnce = this.#fetch;
      const response = await fetchOnce(call.url, { method: call.method, headers, body: call.body, signal });
      const receivedAt = Date.now();
      const text = await response.text();
      return { response, text, receivedAt, durationMs: performance.now() - sentAt };
    } catch (error) {
      if (call.signal?.aborted) throw call.signal.reason;
      throw connectionFailure(timeout.signal.aborted ? timeout.signal.reason : error, call.limits.timeoutMs);
    } finally {
      timerStop.abort();
    }
  }

  #answer(call: Call, response: Response, text: string, held: HeldAnswer | undefined): Answer {
    if (response.status === 304) {
      if (!held) throw unexpected(response, 'a 304 to a request that held no copy');
      return { body: JSON.parse(held.body), headers: response.headers };
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (error) {
      throw unexpected(response, 'a body that is not JSON', error);
    }
    const etag = response.headers.get('etag');
    if (this.#cache && call.method === 'GET') {
      if (etag) this.#cache.set(call.url, { etag, body: text });
      else this.#cache.delete(call.url);
    }
    return { body, headers: response.headers };
  }

  #noticeDeprecation({ operation, url }: Call, headers: Headers): void {
    if (this.#deprecationsReported.has(operation)) return;
    const notice = deprecationOf(operation, headers, url);
    if (!notice) return;
    this.#deprecationsReported.add(operation);
    this.#onDeprecation(notice);
  }
}

/** An attempt's answer, its body read. */
interface Sent {
  response: Response;
  text: string;
  receivedAt: number;
  durationMs: number;
}

/** The client's limits overridden by `options`, each checked: a `TypeError` names the one refused. */
function limitsOf(options: RetryOptions, defaults: Limits): Limits {
  const { maxRetries = defaults.maxRetries, timeoutMs = defaults.timeoutMs, maxWaitMs = defaults.maxWaitMs } = options;
  if (!Number.isInteger(maxRetries) || maxRetries < 0)
    throw new TypeError(`maxRetries must be an integer of 0 or more, got ${String(maxRetries)}`);
  if (typeof timeoutMs !== 'number' || !(timeoutMs > 0))
    throw new TypeError(`timeoutMs must be a number above 0, got ${String(timeoutMs)}`);
  if (typeof maxWaitMs !== 'number' || !(maxWaitMs >= 0))
    throw new TypeError(`maxWaitMs must be a number of 0 or more, got ${String(maxWaitMs)}`);
  return { maxRetries, timeoutMs, maxWaitMs };
}

/**
 * What is retried, as the README's table says: no answer (a failed connection, a timeout); 408,
 * 429, 500, 502, 503 and 504 whatever the body (a gateway's HTML page included), for reads and
 * creates alike (a create always carries its Idempotency-Key); and a create's 409
 * `idempotency_key_in_use` (its first request still runs; retried, it gets that request's answer).
 * No other 4xx: sent again, it would fail again. A 429 `credits_exhausted` only with a
 * `Retry-After` (the next refill; retryOrThrow holds it to maxWaitMs): without a refill, no wait
 * brings the credits back.
 */
function isRetried(call: Call, failure: PetStoreError): boolean {
  if (failure.code === 'credits_exhausted') return failure.retryAfter !== undefined;
  if (failure instanceof ConnectionError || failure instanceof TimeoutError || RETRIED_STATUSES.has(failure.status)) return true;
  return failure.status === 409 && failure.code === 'idempotency_key_in_use' && call.idempotencyKey !== undefined;
}

/** The service's Error body as a PetStoreError, with the answer's request id and Retry-After; another body as unexpected_response. */
function serviceError(response: Response, text: string, retryAfterMs: number | undefined): PetStoreError {
  let body: { code?: unknown; message?: unknown } | undefined;
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    body = undefined;
  }
  const known = typeof body?.code === 'string' && typeof body.message === 'string';
  return errorOf({
    status: response.status,
    code: known ? (body!.code as ServiceErrorCode) : 'unexpected_response',
    message: known ? (body!.message as string) : `The service answered HTTP ${response.status} without the service's error body`,
    requestId: response.headers.get('x-request-id') ?? undefined,
    retryAfter: retryAfterMs === undefined ? undefined : Math.ceil(retryAfterMs / 1000),
  });
}

function unexpected(response: Response, what: string, cause?: unknown): PetStoreError {
  return new PetStoreError({
    status: response.status,
    code: 'unexpected_response',
    message: `The service answered ${what}`,
    requestId: response.headers.get('x-request-id') ?? undefined,
    cause,
  });
}

/** A bound of a usage range as the service reads it: a Date as its ISO 8601 string, a string as given (the service checks it). */
function dateTimeOf(name: 'start' | 'end', value: Date | string): string {
  if (typeof value === 'string') return value;
  if (!(value instanceof Date) || Number.isNaN(value.getTime()))
    throw new TypeError(`${name} must be a valid Date or an ISO 8601 date-time string`);
  return value.toISOString();
}

function refusedLink(headers: Headers, what: string): PetStoreError {
  return new PetStoreError({
    status: 200,
    code: 'unexpected_response',
    message: `The service answered ${what}; the walk stops there`,
    requestId: headers.get('x-request-id') ?? undefined,
  });
}

function connectionFailure(error: unknown, timeoutMs: number): ConnectionError | TimeoutError {
  if (error instanceof AttemptTimeout) {
    return new TimeoutError({ status: 0, code: 'timeout', message: `No answer within ${timeoutMs} ms`, cause: error });
  }
  const reason = error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error);
  return new ConnectionError({ status: 0, code: 'network_error', message: `The request failed: ${reason}`, cause: error });
}

/** A v4 UUID; from getRandomValues where randomUUID is missing (it needs a secure context: https or localhost). */
function randomUuid(): string {
  const { crypto } = globalThis;
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The default notice: one warning, as Node reports its own deprecations, or on the console. */
function warnOfDeprecation({ operation, sunset, link }: DeprecationNotice): void {
  const message =
    `The pet store API's ${operation} is deprecated` +
    (sunset ? ` and will be removed on ${sunset.toUTCString()}` : '') +
    (link ? `; see ${link}` : '');
  const host = globalThis as { process?: { emitWarning?: (message: string, options: { type: string; code: string }) => void } };
  if (typeof host.process?.emitWarning === 'function')
    host.process.emitWarning(message, { type: 'DeprecationWarning', code: 'PET_STORE_DEPRECATED' });
  else console.warn(message);
}
