import { ConditionalCache, type HeldAnswer } from './conditional-cache.js';
import { PetStoreError } from './errors.js';
import { clockOffsetMs, deprecationOf, linksOf, retryAfterMs, type DeprecationNotice, type RateLimit } from './headers.js';
import { RateGate } from './rate-gate.js';
import type { NewPet, Pet, PetStatus, ServiceErrorCode } from './types.js';
import { VERSION } from './version.js';
import { backoffMs, sleep } from './waits.js';

export interface PetStoreClientOptions {
  /** The API's base address, ending in `/v1`, e.g. `https://pets.example.com/v1`. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>`. */
  apiKey: string;
  /** Retries of one call after a retryable failure (default 3). */
  maxRetries?: number;
  /** How long one attempt may take, answer body included (default 10 s). */
  timeoutMs?: number;
  /** The longest the client waits for the key's rate limit before failing instead (default 60 s). */
  maxWaitMs?: number;
  /** The fetch to use (default: the platform's). */
  fetch?: typeof fetch;
  /** Conditional reads: keep the last answer of each read and revalidate it (`true`: up to 1,000 reads). */
  cache?: boolean | { maxEntries: number };
  /** Called once per deprecated operation the client calls (default: a warning, once). */
  onDeprecation?: (notice: DeprecationNotice) => void;
  /** The User-Agent header (default `pet-store-client/<version>`; browsers may not send it). */
  userAgent?: string;
}

export interface CallOptions {
  /** Aborting it stops the call at once, whatever it is waiting for; it rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface ListOptions extends CallOptions {
  /** Only animals with this status. */
  status?: PetStatus;
  /** Animals per page, 1 to 100 (the service's default: 20). */
  limit?: number;
}

export interface CreateOptions extends CallOptions {
  /** The create's Idempotency-Key (default: a new random UUID per call); sent unchanged on every retry. */
  idempotencyKey?: string;
}

const DEFAULTS = { maxRetries: 3, timeoutMs: 10_000, maxWaitMs: 60_000, cacheEntries: 1_000 };

type Operation = 'listPets' | 'createPet' | 'getPet';

interface Call {
  operation: Operation;
  method: 'GET' | 'POST';
  url: string;
  body?: string;
  idempotencyKey?: string;
  signal: AbortSignal | undefined;
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
  readonly #maxRetries: number;
  readonly #timeoutMs: number;
  readonly #maxWaitMs: number;
  readonly #fetch: typeof fetch;
  readonly #cache: ConditionalCache | undefined;
  readonly #onDeprecation: (notice: DeprecationNotice) => void;
  readonly #deprecationsReported = new Set<Operation>();
  readonly #gate: RateGate;

  constructor(options: PetStoreClientOptions) {
    const baseUrl = options.baseUrl.replace(/\/+$/, '');
    if (!/^https?:\/\/[^/]+(\/.*)?\/v1$/.test(baseUrl)) {
      throw new TypeError(`baseUrl must be the API's http(s) address ending in /v1, got ${JSON.stringify(options.baseUrl)}`);
    }
    if (!options.apiKey) throw new TypeError('apiKey is required');
    this.#baseUrl = baseUrl;
    this.#headers = {
      authorization: `Bearer ${options.apiKey}`,
      accept: 'application/json',
      'user-agent': options.userAgent ?? `pet-store-client/${VERSION}`,
    };
    this.#maxRetries = options.maxRetries ?? DEFAULTS.maxRetries;
    this.#timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
    this.#maxWaitMs = options.maxWaitMs ?? DEFAULTS.maxWaitMs;
    // Bound: a platform fetch called as a method of another object throws in browsers.
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    const cache = options.cache === true ? { maxEntries: DEFAULTS.cacheEntries } : options.cache || undefined;
    this.#cache = cache ? new ConditionalCache(cache.maxEntries) : undefined;
    this.#onDeprecation = options.onDeprecation ?? warnOfDeprecation;
    this.#gate = new RateGate(this.#maxWaitMs);
  }

  /** The rate limit the last answer stated (undefined before the first). */
  get rateLimit(): RateLimit | undefined {
    return this.#gate.last;
  }

  /** One page of animals, in id order (the first `limit`, 20 by default). allPets walks every page. */
  async listPets({ status, limit, signal }: ListOptions = {}): Promise<Pet[]> {
    return (await this.#call({ operation: 'listPets', method: 'GET', url: this.#listUrl({ status, limit }), signal })).body as Pet[];
  }

  /**
   * Every animal, in id order, page after page as the service links them (Link rel="next"). A
   * walk returns each animal that existed when it began exactly once.
   */
  async *allPets({ status, limit, signal }: ListOptions = {}): AsyncGenerator<Pet, void, undefined> {
    let url: string | undefined = this.#listUrl({ status, limit });
    while (url) {
      const { body, headers } = await this.#call({ operation: 'listPets', method: 'GET', url, signal });
      yield* body as Pet[];
      const next = linksOf(headers, url).get('next');
      // Only the link's query (its cursor) is taken, onto this client's own address, so the key
      // is never sent to a host the caller did not give.
      url = next === undefined ? undefined : `${this.#baseUrl}/pets${new URL(next).search}`;
    }
  }

  /**
   * Adds an animal. Always sent with an Idempotency-Key (a new UUID unless one is given), so a
   * create whose answer was lost is retried safely: the service answers the retry with the first
   * create's 201 and adds no second animal.
   */
  async createPet(pet: NewPet, { idempotencyKey = globalThis.crypto.randomUUID(), signal }: CreateOptions = {}): Promise<Pet> {
    const url = `${this.#baseUrl}/pets`;
    return (await this.#call({ operation: 'createPet', method: 'POST', url, body: JSON.stringify(pet), idempotencyKey, signal }))
      .body as Pet;
  }

  /**
   * One animal by id; 404 `not_found` when there is none.
   * @deprecated The service removes this operation on 5 December 2030: use listPets (with its status filter).
   */
  async getPet(id: number, { signal }: CallOptions = {}): Promise<Pet> {
    return (await this.#call({ operation: 'getPet', method: 'GET', url: `${this.#baseUrl}/pets/${id}`, signal })).body as Pet;
  }

  #listUrl({ status, limit }: Omit<ListOptions, 'signal'>): string {
    const query = new URLSearchParams();
    if (limit !== undefined) query.set('limit', String(limit));
    if (status !== undefined) query.set('status', status);
    return `${this.#baseUrl}/pets${query.size ? `?${query}` : ''}`;
  }

  /** The call with its retries: each attempt through the rate gate, failures retried while they may be. */
  async #call(call: Call): Promise<Answer> {
    for (let attempt = 0; ; attempt++) {
      await this.#gate.acquire(call.signal);
      const held = call.method === 'GET' ? this.#cache?.get(call.url) : undefined;
      let response: Response;
      let text: string;
      let receivedAt: number;
      try {
        ({ response, text, receivedAt } = await this.#attempt(call, held));
      } catch (error) {
        this.#gate.settle(undefined, Date.now());
        if (call.signal?.aborted) throw call.signal.reason;
        const failure = connectionFailure(error, this.#timeoutMs);
        // Reads are always safe to repeat, and a create always carries its Idempotency-Key.
        if (attempt >= this.#maxRetries) throw failure;
        await sleep(backoffMs(attempt), call.signal);
        continue;
      }
      this.#gate.settle(response, receivedAt);
      this.#noticeDeprecation(call, response.headers);
      if (response.ok || response.status === 304) return this.#answer(call, response, text, held);

      const error = serviceError(response, text, receivedAt);
      if (!isRetryable(call, response.status, error.code) || attempt >= this.#maxRetries) throw error;
      // Never before Retry-After; past it by a random backoff that grows with each retry, so that
      // callers told the same time do not all come back at once.
      const wait = (error.retryAfter ?? 0) * 1000 + backoffMs(attempt);
      if (wait > this.#maxWaitMs) throw error;
      await sleep(wait, call.signal);
    }
  }

  /** One request, its whole answer read within timeoutMs. */
  async #attempt(call: Call, held: HeldAnswer | undefined): Promise<{ response: Response; text: string; receivedAt: number }> {
    const headers: Record<string, string> = { ...this.#headers };
    if (call.body !== undefined) headers['content-type'] = 'application/json';
    if (call.idempotencyKey !== undefined) headers['idempotency-key'] = call.idempotencyKey;
    if (held) headers['if-none-match'] = held.etag;
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(new AttemptTimeout()), this.#timeoutMs);
    const signal = call.signal ? AbortSignal.any([call.signal, timeout.signal]) : timeout.signal;
    try {
      const fetchOnce = this.#fetch;
      const response = await fetchOnce(call.url, { method: call.method, headers, body: call.body, signal });
      const receivedAt = Date.now();
      return { response, text: await response.text(), receivedAt };
    } catch (error) {
      throw timeout.signal.aborted ? timeout.signal.reason : error;
    } finally {
      clearTimeout(timer);
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

/**
 * 429 and 503 (after their Retry-After), and a create's 409 `idempotency_key_in_use` (its first
 * request still runs; retried after Retry-After, it gets that request's answer). No other 4xx:
 * sent again, it would fail again.
 */
function isRetryable(call: Call, status: number, code: string): boolean {
  if (status === 429 || status === 503) return true;
  return status === 409 && code === 'idempotency_key_in_use' && call.idempotencyKey !== undefined;
}

/** The service's Error body as a PetStoreError, with the answer's request id and Retry-After. */
function serviceError(response: Response, text: string, receivedAt: number): PetStoreError {
  let body: { code?: unknown; message?: unknown } | undefined;
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    body = undefined;
  }
  if (typeof body?.code !== 'string' || typeof body.message !== 'string') {
    return unexpected(response, `HTTP ${response.status} without the service's error body`);
  }
  const retryAfter = retryAfterMs(response.headers, clockOffsetMs(response.headers, receivedAt), receivedAt);
  return new PetStoreError({
    status: response.status,
    code: body.code as ServiceErrorCode,
    message: body.message,
    requestId: response.headers.get('x-request-id') ?? undefined,
    retryAfter: retryAfter === undefined ? undefined : Math.ceil(retryAfter / 1000),
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

function connectionFailure(error: unknown, timeoutMs: number): PetStoreError {
  if (error instanceof AttemptTimeout) {
    return new PetStoreError({ status: 0, code: 'timeout', message: `No answer within ${timeoutMs} ms`, cause: error });
  }
  const reason = error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error);
  return new PetStoreError({ status: 0, code: 'network_error', message: `The request failed: ${reason}`, cause: error });
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
