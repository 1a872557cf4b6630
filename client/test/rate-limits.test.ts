// The client and the service's rate limits, for real: keys allowed 3 requests a minute asked for more.
// The app's clock runs at real speed but is moved to a few seconds before a minute boundary
// before each test, so a window resets after a short real wait instead of up to a minute.
import type { FastifyInstance } from 'fastify';
import { appTest, expect } from '../../test/support/fixtures.js';
import { bearer, waitForKeyOnApp } from '../../test/support/keys.js';
import { MINUTE } from '../../test/support/time.js';
import { insertBalance } from '../../test/support/credit-balances.js';
import { PetStoreClient, PetStoreError, RateLimitError, type PetStoreClientOptions } from '../src/index.js';
import { recordingFetch } from './support.js';
import { minuteAndDay } from '../../src/plans/limits.js';

/** The service's clock: real time, plus however far a test has moved it on. */
const clock = {
  offset: 0,
  now: () => Date.now() + clock.offset,
  /** Moves the clock forward into a later minute window (none of whose requests were made yet), `seconds` before its end. */
  toBeforeMinuteEnds(seconds: number) {
    const now = clock.now();
    clock.offset += (Math.floor(now / MINUTE) + 2) * MINUTE - seconds * 1000 - now;
  },
};

const PER_MINUTE = 3;
const SECONDS_LEFT = 2;
/** A caller refused more than this often in one window is banned: low, so that any carelessness would show. */
const BAN_THRESHOLD = 2;

const test = appTest({ deps: { now: clock.now }, env: { RATE_LIMIT_BAN_THRESHOLD: String(BAN_THRESHOLD) } }).extend(
  'origin',
  async ({ t, port }) => {
    // The server's Date header tells its clock; with the clock moved, it must tell the moved one.
    if (!t.app.server.listeners('request').some((listener) => listener === dateByAppClock))
      t.app.server.prependListener('request', dateByAppClock);
    return `http://127.0.0.1:${port}`;
  },
);

function dateByAppClock(_request: unknown, response: { setHeader: (name: string, value: string) => void }) {
  response.setHeader('date', new Date(clock.now()).toUTCString());
}

/** A new key of the enterprise plan limited to PER_MINUTE requests a minute, usable on the app. */
async function limitedKey(app: FastifyInstance, name: string) {
  const { key, record } = await app.apiKeysRepository.create({
    plan: 'enterprise',
    name,
    limits: minuteAndDay(PER_MINUTE, 1_000),
  });
  await waitForKeyOnApp(app, bearer(key));
  return { key, quotaId: record.quotaId };
}

function clientOf(origin: string, apiKey: string, options: Partial<PetStoreClientOptions> = {}) {
  const recorded = recordingFetch();
  return { client: new PetStoreClient({ baseUrl: `${origin}/v1`, apiKey, fetch: recorded.fetch, ...options }), ...recorded };
}

const secondsSince = (start: number) => ((performance.now() - start) / 1000).toFixed(1);

async function expectNotBanned(app: FastifyInstance, quotaId: number) {
  const { decision } = await app.rateLimit.usage({ quotaId, customerId: null }, minuteAndDay(PER_MINUTE, 1_000), app.now());
  expect(decision.outcome).not.toBe('banned');
}

test('a sequential caller asking for more than the minute allows: every call succeeds, none draws a 429', async ({ t, origin }) => {
  const { key, quotaId } = await limitedKey(t.app, 'sequential');
  const { client, exchanges, statuses, count, longestGap } = clientOf(origin, key);
  clock.toBeforeMinuteEnds(SECONDS_LEFT);

  const start = performance.now();
  const remaining: number[] = [];
  for (let call = 0; call < PER_MINUTE + 2; call++) {
    await client.createPet({ name: `Sequential ${call}`, categoryId: 1 });
    remaining.push(client.rateLimit!.remaining);
  }
  const took = secondsSince(start);

  expect(statuses()).toEqual(Array(PER_MINUTE + 2).fill(201));
  expect(count(429)).toBe(0);
  // The window's last request said Remaining 0: the next waited for the reset instead of being refused.
  expect(remaining).toEqual([2, 1, 0, 2, 1]);
  expect(Number(took)).toBeGreaterThanOrEqual(SECONDS_LEFT - 1);
  await expectNotBanned(t.app, quotaId);
  console.log(
    `rate limit, sequential: ${remaining.length} calls on ${PER_MINUTE}/min, ${exchanges.length - remaining.length} retries, ` +
      `${count(429)} 429s, longest wait ${longestGap()} s (for the reset); ${took} s in all`,
  );
});

test('concurrent callers on one client share the wait: every call succeeds, no 429, the key is never banned', async ({ t, origin }) => {
  const { key, quotaId } = await limitedKey(t.app, 'concurrent');
  const { client, exchanges, statuses, count, longestGap } = clientOf(origin, key);
  clock.toBeforeMinuteEnds(SECONDS_LEFT);

  const start = performance.now();
  const pets = await Promise.all(
    Array.from({ length: 2 * PER_MINUTE }, (_, call) => client.createPet({ name: `Concurrent ${call}`, categoryId: 1 })),
  );
  const took = secondsSince(start);

  expect(new Set(pets.map((pet) => pet.id)).size).toBe(2 * PER_MINUTE);
  expect(statuses()).toEqual(Array(2 * PER_MINUTE).fill(201));
  expect(count(429)).toBe(0);
  await expectNotBanned(t.app, quotaId);
  console.log(
    `rate limit, concurrent: ${pets.length} calls at once on ${PER_MINUTE}/min, ${exchanges.length - pets.length} retries, ` +
      `${count(429)} 429s, longest wait ${longestGap()} s (for the reset); ${took} s in all`,
  );
});

test('a second client on a spent key draws one 429, and it and its concurrent calls wait out Retry-After', async ({ t, origin }) => {
  const { key, quotaId } = await limitedKey(t.app, 'shared');
  const first = clientOf(origin, key);
  clock.toBeforeMinuteEnds(SECONDS_LEFT);
  for (let call = 0; call < PER_MINUTE; call++) await first.client.listPets({ limit: 1 });

  const second = clientOf(origin, key);
  const start = performance.now();
  const pages = await Promise.all(Array.from({ length: PER_MINUTE }, () => second.client.listPets({ limit: 1 })));
  const took = secondsSince(start);

  expect(pages).toHaveLength(PER_MINUTE);
  expect(second.statuses()).toEqual([429, ...Array(PER_MINUTE).fill(200)]);
  const refused = second.exchanges[0]!;
  const retryAfter = Number(refused.headers!.get('retry-after'));
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  // None of the three went out before the Retry-After of the one 429 had passed.
  expect(Number(took)).toBeGreaterThanOrEqual(retryAfter - 0.1);
  expect(BAN_THRESHOLD).toBeGreaterThanOrEqual(second.count(429));
  await expectNotBanned(t.app, quotaId);
  console.log(
    `rate limit, second client on a spent key: ${PER_MINUTE} concurrent calls, ${second.count(429)} 429 (Retry-After ${retryAfter} s), ` +
      `${second.exchanges.length - PER_MINUTE} retry, longest wait ${second.longestGap()} s; ${took} s in all`,
  );
});

test('a wait longer than maxWaitMs fails at once, sending nothing; an abort ends a wait at once', async ({ t, origin }) => {
  const { key } = await limitedKey(t.app, 'impatient');
  const { client, exchanges } = clientOf(origin, key, { maxWaitMs: 5_000 });
  clock.toBeforeMinuteEnds(30);
  for (let call = 0; call < PER_MINUTE; call++) await client.listPets({ limit: 1 });
  expect(client.rateLimit!.remaining).toBe(0);

  const start = performance.now();
  const error = await client.listPets({ limit: 1 }).catch((failure: unknown) => failure);
  expect(error).toBeInstanceOf(PetStoreError);
  expect(error).toMatchObject({ status: 429, code: 'rate_limited', requestId: undefined });
  expect((error as PetStoreError).retryAfter).toBeGreaterThanOrEqual(29);
  expect((error as PetStoreError).retryAfter).toBeLessThanOrEqual(32);
  expect(exchanges).toHaveLength(PER_MINUTE);

  // A client that has not heard of the spent key: its call draws the 429, then waits out Retry-After
  // (about 30 s) until its signal aborts; a second call, held by the client's wait, is aborted too.
  const patient = clientOf(origin, key);
  const controller = new AbortController();
  const retrying = patient.client.listPets({ limit: 1, signal: controller.signal });
  const held = patient.client.listPets({ limit: 1, signal: controller.signal });
  await expect.poll(() => patient.statuses()).toEqual([429]);
  const abortedAt = performance.now();
  controller.abort();
  await expect(retrying).rejects.toMatchObject({ name: 'AbortError' });
  await expect(held).rejects.toMatchObject({ name: 'AbortError' });
  const stoppedIn = Math.round(performance.now() - abortedAt);
  // At once, not after the 30 s Retry-After; the bound leaves room for a loaded machine.
  expect(stoppedIn).toBeLessThan(10_000);
  expect(patient.statuses()).toEqual([429]);
  console.log(
    `rate limit, maxWaitMs 5 s: failed in ${secondsSince(start)} s with retryAfter ${(error as PetStoreError).retryAfter} s, nothing sent; ` +
      `an abort ended a Retry-After wait in ${stoppedIn} ms`,
  );
});

test('the setup bans for real: a caller that ignores 429s gets the key banned', async ({ t, origin }) => {
  const { key } = await limitedKey(t.app, 'careless');
  clock.toBeforeMinuteEnds(30);
  const codes: string[] = [];
  for (let request = 0; request < PER_MINUTE + BAN_THRESHOLD + 2; request++) {
    const response = await fetch(`${origin}/v1/pets?limit=1`, { headers: bearer(key) });
    codes.push(response.ok ? 'ok' : ((await response.json()) as { code: string }).code);
  }
  expect(codes.at(-1)).toBe('api_key_banned');
  console.log(`rate limit, a careless caller without the client: ${codes.join(', ')}`);
});

test('getRateLimit answers at once on a spent window, spending nothing, and a 429 of its own limit holds up no call', async ({
  t,
  origin,
}) => {
  const { key } = await limitedKey(t.app, 'standing');
  const { client, statuses } = clientOf(origin, key);
  clock.toBeforeMinuteEnds(30);
  for (let call = 0; call < PER_MINUTE; call++) await client.listPets({ limit: 1 });
  expect(client.rateLimit!.remaining).toBe(0);

  // The window is spent: a listPets would wait for the reset; the lookup is sent at once.
  const standing = await client.getRateLimit();
  expect(standing).toMatchObject({
    plan: 'enterprise',
    windows: [
      { name: 'minute', limit: PER_MINUTE, remaining: 0, windowSeconds: 60 },
      { name: 'day', limit: 1_000, remaining: 1_000 - PER_MINUTE - 1, windowSeconds: 86_400 },
    ],
    minute: { limit: PER_MINUTE, remaining: 0, used: PER_MINUTE },
    day: { limit: 1_000, used: PER_MINUTE + 1 }, // and the request that waited for the key
    concurrency: { limit: 100, inFlight: 0 },
    costs: { listPets: 1, createPet: 1, getPet: 1 },
  });
  expect(statuses()).toEqual([200, 200, 200, 200]);
  for (let call = 0; call < 59; call++) await client.getRateLimit();
  const refused = await client.getRateLimit({ maxWaitMs: 0 }).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(PetStoreError);
  expect(refused).toMatchObject({ status: 429, code: 'rate_limited' });
  // The gate learnt nothing from it: the pets calls wait for their own window only.
  expect(client.rateLimit!.remaining).toBe(0);
});

test('a key whose prepaid credits run out: getRateLimit shows them; the call past them is a credits_exhausted RateLimitError, thrown at once', async ({
  t,
  origin,
}) => {
  const { key, quotaId } = await limitedKey(t.app, 'prepaid');
  // No refill: the 429 carries no Retry-After, so no wait would help and the client sends it once.
  await insertBalance(t.app.db, { quotaId }, 2);
  expect(await t.app.keyNotices.catchUp()).toBe(true);
  const { client, statuses } = clientOf(origin, key);
  clock.toBeforeMinuteEnds(30);
  expect((await client.getRateLimit()).credits).toEqual({ remaining: 2, refillAt: null });
  await client.listPets({ limit: 1 });
  await client.listPets({ limit: 1 });
  const refused = await client.listPets({ limit: 1 }).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(RateLimitError);
  expect(refused).toMatchObject({ status: 429, code: 'credits_exhausted', retryAfter: undefined });
  expect(statuses()).toEqual([200, 200, 200, 429]);
  expect((await client.getRateLimit()).credits).toEqual({ remaining: 0, refillAt: null });
  // The windows lost nothing to the refusal: the minute's third unit is still there.
  expect(client.rateLimit!.remaining).toBe(1);
});
