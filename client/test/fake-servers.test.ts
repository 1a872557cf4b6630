// The client against fake servers answering what the real service cannot be made to answer: a
// gateway's HTML 502, a hostile Link, Retry-After as an HTTP date or a minute long, a key out of
// quota whose limit is lifted, a key whose credits are spent (429 credits_exhausted). Waits of a
// minute or more are not waited: the test moves the client's clock (vitest's fake timers) once the
// client says, through onRetry, how long it waits.
import { webcrypto } from 'node:crypto';
import { afterEach, describe, expect, expectTypeOf, it, vi } from 'vitest';
import {
  ConflictError,
  PermissionDeniedError,
  PetStoreClient,
  PetStoreError,
  RateLimitError,
  ServerError,
  type PetStoreClientOptions,
  type RetryEvent,
} from '../src/index.js';
import { answerGatewayPage, answerJson, fakeServer, type ReceivedRequest } from './support.js';
import type { ServerResponse } from 'node:http';

type Answer = (request: ReceivedRequest, response: ServerResponse, index: number) => void;

const servers: Array<{ close: () => Promise<void> }> = [];
afterEach(async () => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** A fake server answering as `answer` says, and a client of it (options added to the defaults). */
async function clientOf(answer: Answer, options: Partial<PetStoreClientOptions> = {}) {
  const server = await fakeServer(answer);
  servers.push(server);
  const client = new PetStoreClient({ baseUrl: `${server.origin}/v1`, apiKey: 'psk_fake', ...options });
  return { client, server, requests: server.requests };
}

/** Answers each request with the next of `answers`, the last one for ever after. */
const inTurn =
  (...answers: Answer[]): Answer =>
  (request, response, index) =>
    answers[Math.min(index, answers.length - 1)]!(request, response, index);

const pets: Answer = (_request, response) => answerJson(response, 200, []);
const refused =
  (status: number, code: string, headers: Record<string, string> = {}): Answer =>
  (_request, response) =>
    answerJson(response, status, { code, message: `refused: ${code}` }, headers);

/** The fake timers the client's waits run on: Date and timers only, so fetch and the servers run as ever. */
const useClientClock = () => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });

/** Resolves with the next onRetry event; the call's promise is raced so a failure shows at once. */
function nextRetry(events: RetryEvent[]) {
  const seen = events.length;
  return vi.waitUntil(() => events[seen], { timeout: 10_000, interval: 5 });
}

describe('1. waiting is bounded by what the service said', () => {
  it.each([
    { retryAfter: 60, options: {}, what: 'Retry-After: 60 under the default options' },
    { retryAfter: 3, options: { maxWaitMs: 3_000 }, what: 'Retry-After: 3 with maxWaitMs 3000' },
  ])('a 429 with $what is waited out, its spread at most 1 s', async ({ retryAfter, options }) => {
    useClientClock();
    const retries: RetryEvent[] = [];
    const { client, requests } = await clientOf(inTurn(refused(429, 'rate_limited', { 'retry-after': String(retryAfter) }), pets), {
      ...options,
      onRetry: (event) => retries.push(event),
    });
    const listing = client.listPets();
    listing.catch(() => {});
    const retry = await Promise.race([nextRetry(retries), listing.then(() => undefined)]);
    expect(retry).toMatchObject({ attempt: 1, reason: { status: 429, code: 'rate_limited', retryAfter } });
    expect(retry!.delayMs).toBeGreaterThanOrEqual(retryAfter * 1000);
    expect(retry!.delayMs).toBeLessThanOrEqual(retryAfter * 1000 + 1000);
    expect(requests).toHaveLength(1);
    // A moment short of the stated wait: nothing sent yet.
    await vi.advanceTimersByTimeAsync(retryAfter * 1000 - 1);
    expect(requests).toHaveLength(1);
    // To the moment of the retry, not past it: the retry's own timeout runs on this clock too, and
    // a clock moved 10 s on while its request is on the wire would time it out.
    await vi.advanceTimersByTimeAsync(retry!.delayMs - (retryAfter * 1000 - 1));
    await expect(listing).resolves.toEqual([]);
    expect(requests).toHaveLength(2);
  });

  it('Retry-After as an HTTP date is read by the service’s clock: a date 30 s after its Date is a 30 s wait, one 120 s after fails at once', async () => {
    useClientClock();
    // The service's clock is an hour ahead of the client's: its date means nothing by the client's clock.
    const serviceNow = () => new Date(Math.floor(Date.now() / 1000) * 1000 + 3_600_000);
    const inSeconds =
      (seconds: number): Answer =>
      (_request, response) => {
        const now = serviceNow();
        const at = new Date(now.getTime() + seconds * 1000);
        answerJson(
          response,
          503,
          { code: 'service_unavailable', message: 'later' },
          { date: now.toUTCString(), 'retry-after': at.toUTCString() },
        );
      };
    const retries: RetryEvent[] = [];
    const { client, requests } = await clientOf(inTurn(inSeconds(30), pets, inSeconds(120)), { onRetry: (event) => retries.push(event) });
    const listing = client.listPets();
    listing.catch(() => {});
    const retry = await Promise.race([nextRetry(retries), listing.then(() => undefined)]);
    expect(retry!.reason).toMatchObject({ status: 503, retryAfter: 30 });
    expect(retry!.delayMs).toBeGreaterThanOrEqual(29_000);
    expect(retry!.delayMs).toBeLessThanOrEqual(31_000);
    await vi.advanceTimersByTimeAsync(retry!.delayMs);
    await expect(listing).resolves.toEqual([]);

    const error = await client.listPets().catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(ServerError);
    expect(error).toMatchObject({ status: 503, retryAfter: 120 });
    expect(requests).toHaveLength(3);
  });

  it('while the key is out of quota beyond maxWaitMs, calls fail at once without sending, except one probe a minute that sees a lifted limit', async () => {
    useClientClock();
    let lifted = false;
    const { client, requests } = await clientOf((request, response, index) =>
      lifted ? pets(request, response, index) : refused(429, 'api_key_banned', { 'retry-after': '900' })(request, response, index),
    );
    await expect(client.listPets()).rejects.toMatchObject({ status: 429, code: 'api_key_banned', retryAfter: 900 });
    const held = await client.listPets().catch((failure: unknown) => failure);
    expect(held).toBeInstanceOf(RateLimitError);
    expect(held).toMatchObject({ status: 429, code: 'rate_limited', requestId: undefined });
    expect((held as RateLimitError).retryAfter).toBeGreaterThan(800);
    expect(requests).toHaveLength(1);

    // A minute on, one call goes out: still banned, it fails as the service says; the next is held again.
    vi.setSystemTime(Date.now() + 60_000);
    await expect(client.listPets()).rejects.toMatchObject({ code: 'api_key_banned' });
    await expect(client.listPets()).rejects.toMatchObject({ code: 'rate_limited' });
    expect(requests).toHaveLength(2);

    // The ban is lifted (an admin, a plan change): the next minute's probe sees it, and calls go out again.
    lifted = true;
    await expect(client.listPets()).rejects.toMatchObject({ code: 'rate_limited' });
    vi.setSystemTime(Date.now() + 60_000);
    await expect(client.listPets()).resolves.toEqual([]);
    await expect(client.listPets()).resolves.toEqual([]);
    expect(requests).toHaveLength(4);
  });
});

describe('2. credits', () => {
  /** The usual rate-limit headers of the service's answers: the minute has room, whatever the credits say. */
  const windowHeaders = () => ({
    'x-ratelimit-limit': '100',
    'x-ratelimit-remaining': '90',
    'x-ratelimit-reset': String(Math.ceil(Date.now() / 1000) + 60),
  });
  const creditsExhausted =
    (retryAfter?: number): Answer =>
    (_request, response) =>
      answerJson(
        response,
        429,
        { code: 'credits_exhausted', message: 'The credits are spent', status: 429 },
        { ...windowHeaders(), ...(retryAfter === undefined ? {} : { 'retry-after': String(retryAfter) }) },
      );
  const created: Answer = (_request, response) => answerJson(response, 201, { id: 7, name: 'Rex', categoryId: 1 }, windowHeaders());
  /** A read sent with maxWaitMs 0: the rate gate would refuse it at once (`rate_limited`) if it held calls back. */
  const notHeldBack = (client: PetStoreClient) => client.listPets({ maxWaitMs: 0 });

  it('getRateLimit shows the credits left and when they refill, null without credits', async () => {
    const standing = (credits: unknown) => ({
      plan: 'pro',
      minute: { limit: 100, remaining: 90, used: 10, reset: 1_795_000_000 },
      day: { limit: 10_000, remaining: 9_990, used: 10, reset: 1_795_046_400 },
      concurrency: { limit: 10, inFlight: 0 },
      credits,
      costs: { listPets: 1, createPet: 5, getPet: 1 },
    });
    const refilled = { remaining: 40, refillAt: '2026-12-01T00:00:00.000Z' };
    const { client, requests } = await clientOf(
      inTurn(
        (_request, response) => answerJson(response, 200, standing(refilled)),
        (_request, response) => answerJson(response, 200, standing({ remaining: 3, refillAt: null })),
        (_request, response) => answerJson(response, 200, standing(null)),
      ),
    );
    const first = await client.getRateLimit();
    expectTypeOf(first.credits).toEqualTypeOf<{ remaining: number; refillAt: string | null } | null>();
    expect(first.credits).toEqual(refilled);
    expect(new Date(first.credits!.refillAt!).toISOString()).toBe(refilled.refillAt);
    expect((await client.getRateLimit()).credits).toEqual({ remaining: 3, refillAt: null });
    expect((await client.getRateLimit()).credits).toBeNull();
    expect(requests.map((request) => request.url)).toEqual(Array(3).fill('/v1/rate_limit'));
  });

  it('credits_exhausted without Retry-After (no refill) is thrown at once, one request made, and holds back no other call', async () => {
    const retries: RetryEvent[] = [];
    const { client, requests } = await clientOf(inTurn(creditsExhausted(), pets), { onRetry: (event) => retries.push(event) });
    const error = await client.createPet({ name: 'Rex', categoryId: 1 }).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(RateLimitError);
    expect(error).toMatchObject({ status: 429, code: 'credits_exhausted', retryAfter: undefined });
    expect(requests).toHaveLength(1);
    expect(retries).toEqual([]);
    await expect(notHeldBack(client)).resolves.toEqual([]);
    expect(requests).toHaveLength(2);
  });

  it('credits_exhausted with a Retry-After within maxWaitMs is waited out and retried; meanwhile other calls go out', async () => {
    useClientClock();
    const retries: RetryEvent[] = [];
    // The create (5 units) is refused until the refill in 30 s; a read (1 unit) still passes.
    const { client, requests } = await clientOf(inTurn(creditsExhausted(30), pets, created), { onRetry: (event) => retries.push(event) });
    const creating = client.createPet({ name: 'Rex', categoryId: 1 });
    creating.catch(() => {});
    const retry = await Promise.race([nextRetry(retries), creating.then(() => undefined)]);
    expect(retry).toMatchObject({ attempt: 1, reason: { status: 429, code: 'credits_exhausted', retryAfter: 30 } });
    expect(retry!.reason).toBeInstanceOf(RateLimitError);
    expect(retry!.delayMs).toBeGreaterThanOrEqual(30_000);
    expect(retry!.delayMs).toBeLessThanOrEqual(31_000);

    await expect(notHeldBack(client)).resolves.toEqual([]);
    expect(requests.map((request) => request.method)).toEqual(['POST', 'GET']);
    await vi.advanceTimersByTimeAsync(retry!.delayMs);
    await expect(creating).resolves.toMatchObject({ id: 7 });
    expect(requests.map((request) => request.method)).toEqual(['POST', 'GET', 'POST']);
    expect(requests[2]!.headers['idempotency-key']).toBe(requests[0]!.headers['idempotency-key']);
  });

  it('credits_exhausted with a Retry-After beyond maxWaitMs is thrown at once, and the gate does not wait for the refill', async () => {
    const { client, requests } = await clientOf(inTurn(creditsExhausted(3_600), pets));
    const error = await client.createPet({ name: 'Rex', categoryId: 1 }).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(RateLimitError);
    expect(error).toMatchObject({ status: 429, code: 'credits_exhausted', retryAfter: 3_600 });
    expect(requests).toHaveLength(1);
    // Unlike a ban's (section 1), this Retry-After holds up no other call: it is sent and answered.
    await expect(notHeldBack(client)).resolves.toEqual([]);
    expect(requests).toHaveLength(2);
  });
});

describe('3. options and arguments checked', () => {
  it.each([
    ['maxRetries', -1],
    ['maxRetries', 1.5],
    ['maxRetries', Number.NaN],
    ['timeoutMs', 0],
    ['timeoutMs', -5],
    ['timeoutMs', Number.NaN],
    ['maxWaitMs', -1],
    ['maxWaitMs', Number.NaN],
  ])('%s: %s is a TypeError naming it, at construction and per call, and nothing is sent', async (option, value) => {
    expect(() => new PetStoreClient({ baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'psk_x', [option]: value })).toThrow(
      new RegExp(`^${option} must be`),
    );
    const { client, requests } = await clientOf(pets);
    await expect(client.listPets({ [option]: value })).rejects.toThrow(TypeError);
    await expect(client.listPets({ [option]: value })).rejects.toThrow(option);
    expect(requests).toHaveLength(0);
  });

  it('an idempotencyKey of the wrong type or form is refused, never sent as a string', async () => {
    const { client, requests } = await clientOf((_request, response) => answerJson(response, 201, { id: 1, name: 'Rex', categoryId: 1 }));
    for (const idempotencyKey of [null, 42, '', 'two words', 'k'.repeat(256), 'ключ']) {
      // @ts-expect-error what a caller without types may pass
      await expect(client.createPet({ name: 'Rex', categoryId: 1 }, { idempotencyKey })).rejects.toThrow(/^idempotencyKey must be/);
    }
    expect(requests).toHaveLength(0);
    await client.createPet({ name: 'Rex', categoryId: 1 }, { idempotencyKey: 'order-4711' });
    expect(requests.map((request) => request.headers['idempotency-key'])).toEqual(['order-4711']);
  });

  it('a stated wait longer than a timer can hold (2^31-1 ms) is slept in pieces, not cut to 1 ms', async () => {
    useClientClock();
    const thirtyDays = 30 * 24 * 3600;
    const retries: RetryEvent[] = [];
    const { client, requests } = await clientOf(inTurn(refused(503, 'service_unavailable', { 'retry-after': String(thirtyDays) }), pets), {
      maxWaitMs: Number.POSITIVE_INFINITY,
      onRetry: (event) => retries.push(event),
    });
    const listing = client.listPets();
    listing.catch(() => {});
    const retry = await Promise.race([nextRetry(retries), listing.then(() => undefined)]);
    expect(retry!.delayMs).toBeGreaterThan(2 ** 31);
    await vi.advanceTimersByTimeAsync(2 ** 31);
    expect(requests).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(retry!.delayMs - 2 ** 31);
    await expect(listing).resolves.toEqual([]);
    expect(requests).toHaveLength(2);
  });
});

describe('4. what is retried', () => {
  it.each([502, 503, 504] as const)(
    'a gateway’s HTML %s is retried, reads and creates alike, a create with its one Idempotency-Key',
    async (status) => {
      const created = { id: 7, name: 'Rex', categoryId: 1 };
      const { client, requests } = await clientOf(
        inTurn(
          (_request, response) => answerGatewayPage(response, status),
          pets,
          (_request, response) => answerGatewayPage(response, status),
          (_request, response) => answerJson(response, 201, created),
        ),
      );
      await expect(client.listPets()).resolves.toEqual([]);
      await expect(client.createPet({ name: 'Rex', categoryId: 1 })).resolves.toEqual(created);
      expect(requests.map((request) => request.method)).toEqual(['GET', 'GET', 'POST', 'POST']);
      expect(requests[2]!.headers['idempotency-key']).toMatch(/^[0-9a-f-]{36}$/);
      expect(requests[3]!.headers['idempotency-key']).toBe(requests[2]!.headers['idempotency-key']);
    },
  );

  it.each([
    [408, 'request_timeout'],
    [429, 'rate_limited'],
    [500, 'internal_error'],
    [503, 'service_unavailable'],
  ])('a JSON %s is retried', async (status, code) => {
    const { client, requests } = await clientOf(inTurn(refused(status, code, { 'retry-after': '0' }), pets));
    await expect(client.listPets()).resolves.toEqual([]);
    expect(requests).toHaveLength(2);
  });

  it.each([
    [
      'a gateway’s 502 page, as unexpected_response',
      (_request: ReceivedRequest, response: ServerResponse) => answerGatewayPage(response, 502),
      502,
      'unexpected_response',
    ],
    [
      'the service’s JSON 500, the first status of the class',
      refused(500, 'internal_error', { 'retry-after': '0' }),
      500,
      'internal_error',
    ],
  ])('a failure retried until maxRetries is spent ends in the class of its status: %s', async (_what, answer, status, code) => {
    const { client, requests } = await clientOf(answer, { maxRetries: 2 });
    const error = await client.listPets().catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(ServerError);
    expect(error).toMatchObject({ name: 'ServerError', status, code });
    expect(requests).toHaveLength(3);
  });

  it.each([
    [400, 'bad_request', PetStoreError],
    [403, 'forbidden', PermissionDeniedError],
    [403, 'origin_not_allowed', PermissionDeniedError],
    [409, 'conflict', ConflictError],
    [410, 'gone', PetStoreError],
    [422, 'idempotency_key_mismatch', ConflictError],
  ])('a %s is not retried', async (status, code, ErrorClass) => {
    const { client, requests } = await clientOf(refused(status, code));
    const error = await client.createPet({ name: 'Rex', categoryId: 1 }).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(ErrorClass);
    expect(error).toMatchObject({ status, code });
    expect(requests).toHaveLength(1);
  });

  it('a local error (a header value fetch refuses, Authorization among the extra headers) is a TypeError, sent and retried never', async () => {
    const { client, requests } = await clientOf(pets);
    await expect(client.listPets({ headers: { 'x-trace': 'a\nb' } })).rejects.toThrow(TypeError);
    await expect(client.listPets({ headers: { 'bad name': 'x' } })).rejects.toThrow(TypeError);
    await expect(client.listPets({ headers: { Authorization: 'Bearer psk_other' } })).rejects.toThrow(/Authorization/);
    expect(requests).toHaveLength(0);
  });
});

describe('5. pages', () => {
  const page =
    (link: string | undefined): Answer =>
    (_request, response) =>
      answerJson(response, 200, [{ id: 1, name: 'Rex', categoryId: 1 }], link ? { link, 'x-request-id': 'req-1' } : {});

  it.each([
    ['another origin', '<https://pets.attacker.example/v1/pets?cursor=Mg>; rel="next"'],
    ['another path', '</v2/pets?cursor=Mg>; rel="next"'],
  ])('a next link to %s: only its cursor is taken, asked of the client’s own baseUrl, which the key never leaves', async (_what, link) => {
    const { client, requests } = await clientOf((request, response) =>
      page(request.url.includes('cursor=') ? undefined : link)(request, response, 0),
    );
    const walked: number[] = [];
    for await (const pet of client.allPets({ limit: 1 })) walked.push(pet.id);
    expect(walked).toEqual([1, 1]);
    expect(requests.map((request) => request.url)).toEqual(['/v1/pets?limit=1', '/v1/pets?limit=1&cursor=Mg']);
    expect(await client.listPetsPage()).toMatchObject({ nextCursor: 'Mg' });
  });

  it.each([
    ['that is not a URL', '<http://[::1>; rel="next"'],
    ['without a cursor', '</v1/pets?limit=1>; rel="next"'],
  ])('a next link %s ends the walk after its page with unexpected_response, and is never followed', async (_what, link) => {
    const { client, requests } = await clientOf(page(link));
    const walked: number[] = [];
    const error = await (async () => {
      for await (const pet of client.allPets()) walked.push(pet.id);
    })().catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(PetStoreError);
    expect(error).toMatchObject({ code: 'unexpected_response', requestId: 'req-1' });
    expect(walked).toEqual([1]);
    await expect(client.listPetsPage()).rejects.toMatchObject({ code: 'unexpected_response' });
    await expect(client.listPets()).resolves.toHaveLength(1);
    expect(requests).toHaveLength(3);
    expect(requests.every((request) => request.url.startsWith('/v1/pets'))).toBe(true);
  });

  it('a next link back to a cursor the walk was given ends it instead of looping', async () => {
    // Page 1 links to A, A to B, B back to A.
    const { client, requests } = await clientOf((request, response) => {
      const cursor = new URL(request.url, 'http://x').searchParams.get('cursor');
      page(`</v1/pets?cursor=${cursor === 'A' ? 'B' : 'A'}>; rel="next"`)(request, response, 0);
    });
    const walked: number[] = [];
    const error = await (async () => {
      for await (const pet of client.allPets()) {
        walked.push(pet.id);
        if (walked.length > 10) break;
      }
    })().catch((failure: unknown) => failure);
    expect(error).toMatchObject({ code: 'unexpected_response' });
    expect(requests.map((request) => request.url)).toEqual(['/v1/pets', '/v1/pets?cursor=A', '/v1/pets?cursor=B']);

    const resumed = await (async () => {
      for await (const pet of client.allPets({ cursor: 'B' })) walked.push(pet.id);
    })().catch((failure: unknown) => failure);
    expect(resumed).toMatchObject({ code: 'unexpected_response' });
    expect(requests.map((request) => request.url).slice(3)).toEqual(['/v1/pets?cursor=B', '/v1/pets?cursor=A']);
  });
});

describe('7. hooks and per-call options', () => {
  it('onRequest, onResponse and onRetry tell each attempt, its answer and the wait before the next', async () => {
    const events: Array<[string, unknown]> = [];
    const { client, server } = await clientOf(
      inTurn(
        (_request, response) =>
          answerJson(response, 503, { code: 'service_unavailable', message: 'later' }, { 'retry-after': '0', 'x-request-id': 'r1' }),
        (_request, response) => answerJson(response, 200, [], { 'x-request-id': 'r2' }),
      ),
      {
        onRequest: (event) => events.push(['request', event]),
        onResponse: (event) => events.push(['response', event]),
        onRetry: (event) => events.push(['retry', event]),
      },
    );
    await client.listPets({ limit: 1 });
    const url = `${server.origin}/v1/pets?limit=1`;
    const attempt = (n: number) => ({ operation: 'listPets', method: 'GET', url, attempt: n });
    expect(events).toEqual([
      ['request', attempt(1)],
      ['response', { ...attempt(1), status: 503, requestId: 'r1', durationMs: expect.any(Number) }],
      ['retry', { ...attempt(1), delayMs: expect.any(Number), reason: expect.objectContaining({ status: 503, requestId: 'r1' }) }],
      ['request', attempt(2)],
      ['response', { ...attempt(2), status: 200, requestId: 'r2', durationMs: expect.any(Number) }],
    ]);
  });

  it('a call’s maxRetries, maxWaitMs, timeoutMs and headers override the client’s for that call', async () => {
    const { client, requests } = await clientOf((request, response) =>
      request.headers['x-slow'] ? undefined : refused(503, 'service_unavailable', { 'retry-after': '5' })(request, response, 0),
    );
    // maxRetries 0: one request, with the extra headers besides the client's own, which they do not replace.
    const extra = { 'X-Trace-Id': 'abc', Accept: 'text/html', 'User-Agent': 'mine' };
    await expect(client.listPets({ maxRetries: 0, headers: extra })).rejects.toMatchObject({ status: 503 });
    expect(requests[0]!.headers).toMatchObject({
      'x-trace-id': 'abc',
      accept: 'application/json',
      'user-agent': 'pet-store-client/1.0.0',
      authorization: 'Bearer psk_fake',
    });
    // maxWaitMs 1 s: a 5 s Retry-After fails at once.
    await expect(client.listPets({ maxWaitMs: 1_000 })).rejects.toMatchObject({ status: 503, retryAfter: 5 });
    expect(requests).toHaveLength(2);
    // A server that never answers this call: its timeoutMs ends it (the client's is 10 s).
    await expect(client.listPets({ timeoutMs: 50, maxRetries: 0, headers: { 'x-slow': 'yes' } })).rejects.toMatchObject({
      name: 'TimeoutError',
      code: 'timeout',
      message: 'No answer within 50 ms',
    });
  });
});

describe('8. the platform', () => {
  it('where crypto.randomUUID is missing (a page served over plain http), a create’s key comes from getRandomValues', async () => {
    const { client, requests } = await clientOf((_request, response) => answerJson(response, 201, { id: 1, name: 'Rex', categoryId: 1 }));
    vi.stubGlobal('crypto', { getRandomValues: (array: Uint8Array) => webcrypto.getRandomValues(array) });
    await client.createPet({ name: 'Rex', categoryId: 1 });
    await client.createPet({ name: 'Rex', categoryId: 1 });
    const keys = requests.map((request) => request.headers['idempotency-key']);
    for (const key of keys) expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(keys[0]).not.toBe(keys[1]);
  });
});
