// The client against the real service (built by buildTestApp on its embedded database, over loopback HTTP).
import { describe, vi } from 'vitest';
import { appTest, expect } from '../../test/support/fixtures.js';
import { freePort } from '../../harness/free-port.js';
import { countPets } from '../../test/support/pets.js';
import {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  ConnectionError,
  NotFoundError,
  PetStoreClient,
  PetStoreError,
  TimeoutError,
  type DeprecationNotice,
  type Pet,
  type PetStoreClientOptions,
} from '../src/index.js';
import { answerLosingProxy, recordingFetch, silentServer } from './support.js';

const PORT = await freePort();
const ORIGIN = `http://127.0.0.1:${PORT}`;
// The service's links name its public address: here, as in production, the one the client is given.
const test = appTest({ env: { PUBLIC_BASE_URL: `${ORIGIN}/v1` } }).extend('origin', { scope: 'file' }, async ({ t }) => {
  if (!t.app.server.listening) await t.app.listen({ port: PORT, host: '127.0.0.1' });
  return ORIGIN;
});

/** A client of the test app's key (enterprise, limits no test reaches), recording its traffic. */
function clientOf(origin: string, apiKey: string, options: Partial<PetStoreClientOptions> = {}) {
  const recorded = recordingFetch();
  const client = new PetStoreClient({ baseUrl: `${origin}/v1`, apiKey, fetch: recorded.fetch, ...options });
  return { client, ...recorded };
}

const keyOf = (auth: { authorization: string }) => auth.authorization.slice('Bearer '.length);
const elapsedSince = (start: number) => Math.round(performance.now() - start);

describe('creates', () => {
  test('an answer lost after the server committed: the retry, with the same key, gets the replayed 201 and one pet exists', async ({
    t,
    origin,
  }) => {
    expect(origin).toBe(ORIGIN);
    const proxy = await answerLosingProxy(PORT);
    try {
      const { client, exchanges } = clientOf(proxy.origin, keyOf(t.auth));
      const before = await countPets(t.db, 'Lost answer');
      proxy.loseNextCreateAnswer();

      const start = performance.now();
      const pet = await client.createPet({ name: 'Lost answer', categoryId: 7, status: 'available' });
      const took = elapsedSince(start);

      expect(proxy.lostAnswers()).toBe(1);
      expect(exchanges).toHaveLength(2);
      const [lost, retry] = exchanges;
      expect(lost!.error).toBeDefined();
      const key = lost!.requestHeaders.get('idempotency-key');
      expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(retry!.requestHeaders.get('idempotency-key')).toBe(key);
      expect(retry!.status).toBe(201);
      expect(retry!.headers!.get('idempotent-replayed')).toBe('true');
      expect(pet).toMatchObject({ name: 'Lost answer', categoryId: 7, status: 'available' });
      expect(await countPets(t.db, 'Lost answer')).toBe(before + 1);
      console.log(
        `lost create answer: ${exchanges.length} requests (1 retry), the retry answered 201 Idempotent-Replayed: true; pets added: 1; ${took} ms in all`,
      );
    } finally {
      await proxy.close();
    }
  });

  test('every create has a key of its own unless given one, sent as given', async ({ t, origin }) => {
    const { client, exchanges } = clientOf(origin, keyOf(t.auth));
    const first = await client.createPet({ name: 'Keyed', categoryId: 1 });
    await client.createPet({ name: 'Keyed', categoryId: 1 });
    const given = await client.createPet({ name: 'Given key', categoryId: 1 }, { idempotencyKey: 'order-4711' });
    const again = await client.createPet({ name: 'Given key', categoryId: 1 }, { idempotencyKey: 'order-4711' });

    const keys = exchanges.map((exchange) => exchange.requestHeaders.get('idempotency-key'));
    expect(new Set(keys.slice(0, 2)).size).toBe(2);
    expect(keys.slice(2)).toEqual(['order-4711', 'order-4711']);
    expect(again).toEqual(given);
    expect(exchanges[3]!.headers!.get('idempotent-replayed')).toBe('true');
    expect(first).not.toHaveProperty('status');
  });
});

test('allPets walks 250 pets page by page, each once and in order; listPetsPage gives each page with its cursor, and a cursor resumes a walk', async ({
  t,
  origin,
}) => {
  const created: Pet[] = [];
  for (let i = 0; i < 250; i++) created.push(await t.app.petsRepository.create({ name: `Walker ${i}`, categoryId: 3, status: 'pending' }));
  const { client, exchanges } = clientOf(origin, keyOf(t.auth));

  const walked: Pet[] = [];
  for await (const pet of client.allPets({ status: 'pending', limit: 100 })) walked.push(pet);

  expect(walked).toEqual(created);
  expect(exchanges.map((exchange) => exchange.status)).toEqual([200, 200, 200]);
  expect(exchanges.every((exchange) => exchange.url.startsWith(`${origin}/v1/pets?`))).toBe(true);
  const pages = exchanges.length;
  expect(await client.listPets({ status: 'pending', limit: 5 })).toEqual(created.slice(0, 5));

  const small: Pet[] = [];
  for await (const pet of clientOf(origin, keyOf(t.auth)).client.allPets({ status: 'pending', limit: 7 })) small.push(pet);
  expect(small.map((pet) => pet.id)).toEqual(created.map((pet) => pet.id));

  const first = await client.listPetsPage({ status: 'pending', limit: 100 });
  expect(first.pets).toEqual(created.slice(0, 100));
  expect(first.requestId).toBe(exchanges.at(-1)!.headers!.get('x-request-id'));
  expect(first.nextCursor).toEqual(expect.any(String));
  const second = await client.listPetsPage({ status: 'pending', limit: 100, cursor: first.nextCursor });
  expect(second.pets).toEqual(created.slice(100, 200));
  const last = await client.listPetsPage({ status: 'pending', limit: 100, cursor: second.nextCursor });
  expect(last).toMatchObject({ pets: created.slice(200), nextCursor: undefined });
  expect(await client.listPets({ status: 'pending', limit: 100, cursor: second.nextCursor })).toEqual(created.slice(200));
  const resumed: Pet[] = [];
  for await (const pet of client.allPets({ status: 'pending', limit: 100, cursor: first.nextCursor })) resumed.push(pet);
  expect(resumed).toEqual(created.slice(100));
  console.log(
    `allPets: ${walked.length} pets in ${pages} pages of 100, and in ${Math.ceil(250 / 7)} pages of 7, each once, in id order; resumed from a page's cursor`,
  );
});

describe('errors', () => {
  test('carry the status, code, message and request id of the answer, and a 4xx is not retried', async ({ t, origin }) => {
    const { client, exchanges } = clientOf(origin, keyOf(t.auth), { onDeprecation: () => {} });

    const missing = await client.getPet(9_007_199_254_740_991).catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(PetStoreError);
    expect(missing).toMatchObject({ name: 'NotFoundError', status: 404, code: 'not_found', retryAfter: undefined });
    expect((missing as PetStoreError).requestId).toBe(exchanges[0]!.headers!.get('x-request-id'));
    expect((missing as PetStoreError).requestId).toMatch(/^[0-9a-f-]{36}$/);

    const invalid = await client.createPet({ name: '', categoryId: 1 }).catch((error: unknown) => error);
    expect(invalid).toMatchObject({ status: 400, code: 'bad_request', message: expect.stringContaining('body/name') });
    expect((invalid as PetStoreError).requestId).toBe(exchanges[1]!.headers!.get('x-request-id'));

    const stranger = clientOf(origin, 'psk_not-a-key');
    await expect(stranger.client.listPets()).rejects.toMatchObject({ status: 401, code: 'unauthorized' });
    expect(stranger.exchanges).toHaveLength(1);
    expect(exchanges).toHaveLength(2);
  });

  test('are of the class their status names, each a PetStoreError, answered by the service or by no one', async ({ t, origin }) => {
    const { client, exchanges } = clientOf(origin, keyOf(t.auth), { onDeprecation: () => {} });
    const failureOf = (call: Promise<unknown>) =>
      call.then(
        () => new Error('answered'),
        (failure: unknown) => failure,
      );
    await client.createPet({ name: 'Once', categoryId: 1 }, { idempotencyKey: 'classes-1' });
    const closed = await silentServer();
    await closed.close();
    const silent = await silentServer();
    try {
      const failures = {
        BadRequestError: await failureOf(client.listPets({ limit: 500 })),
        AuthenticationError: await failureOf(clientOf(origin, 'psk_not-a-key').client.listPets()),
        NotFoundError: await failureOf(client.getPet(9_007_199_254_740_991)),
        ConflictError: await failureOf(client.createPet({ name: 'Other', categoryId: 1 }, { idempotencyKey: 'classes-1' })),
        ConnectionError: await failureOf(clientOf(closed.origin, 'psk_x', { maxRetries: 0 }).client.listPets()),
        TimeoutError: await failureOf(clientOf(silent.origin, 'psk_x', { maxRetries: 0, timeoutMs: 100 }).client.listPets()),
      };
      const classes = { BadRequestError, AuthenticationError, NotFoundError, ConflictError, ConnectionError, TimeoutError };
      for (const [name, failure] of Object.entries(failures)) {
        expect(failure, name).toBeInstanceOf(classes[name as keyof typeof classes]);
        expect(failure, name).toBeInstanceOf(PetStoreError);
        expect((failure as PetStoreError).name).toBe(name);
      }
      expect(failures).toMatchObject({
        BadRequestError: { status: 400, code: 'bad_request' },
        AuthenticationError: { status: 401, code: 'unauthorized' },
        NotFoundError: { status: 404, code: 'not_found' },
        ConflictError: { status: 422, code: 'idempotency_key_mismatch' },
        ConnectionError: { status: 0, code: 'network_error' },
        TimeoutError: { status: 0, code: 'timeout' },
      });
      expect(exchanges.map((exchange) => exchange.status)).toEqual([201, 400, 404, 422]);
    } finally {
      await silent.close();
    }
  });

  test('the base address must be the API, ending in /v1', () => {
    expect(() => new PetStoreClient({ baseUrl: 'http://127.0.0.1:3000', apiKey: 'psk_x' })).toThrow(/ending in \/v1/);
    expect(() => new PetStoreClient({ baseUrl: 'http://127.0.0.1:3000/v1/', apiKey: '' })).toThrow(/apiKey/);
  });
});

describe('timeouts and cancellation', () => {
  test('an attempt without an answer times out and is retried with backoff, then fails with code timeout', async () => {
    const silent = await silentServer();
    try {
      const { client } = clientOf(silent.origin, 'psk_x', { timeoutMs: 150, maxRetries: 2 });
      const start = performance.now();
      const error = await client.listPets().catch((failure: unknown) => failure);
      const elapsed = elapsedSince(start);
      expect(error).toMatchObject({ name: 'TimeoutError', status: 0, code: 'timeout', requestId: undefined });
      expect(silent.requests()).toBe(3);
      // Three attempts of 150 ms each at least; a silent server without the timeout would hold the
      // call for ever, so the upper bound only says it ended (a loaded machine stretches the rest).
      expect(elapsed).toBeGreaterThanOrEqual(3 * 150 - 10);
      expect(elapsed).toBeLessThan(10_000);
      console.log(`timeout: 3 attempts of 150 ms (2 retries) failed in ${elapsed} ms`);
    } finally {
      await silent.close();
    }
  });

  test('an abort stops a call in flight at once, and nothing is retried; an aborted signal sends nothing', async () => {
    const silent = await silentServer();
    try {
      const { client, exchanges } = clientOf(silent.origin, 'psk_x', { timeoutMs: 10_000 });
      const controller = new AbortController();
      const call = client.createPet({ name: 'Never', categoryId: 1 }, { signal: controller.signal });
      await expect.poll(() => silent.requests()).toBe(1);
      const start = performance.now();
      controller.abort();
      await expect(call).rejects.toMatchObject({ name: 'AbortError' });
      const stoppedIn = elapsedSince(start);
      // At once, not after the 10 s timeout; the bound leaves room for a loaded machine.
      expect(stoppedIn).toBeLessThan(5_000);

      const reason = new Error('caller gave up');
      await expect(client.listPets({ signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
      expect(exchanges).toHaveLength(1);
      expect(silent.requests()).toBe(1);
      console.log(`abort: a call in flight stopped ${stoppedIn} ms after its signal`);
    } finally {
      await silent.close();
    }
  });
});

describe('deprecation', () => {
  test('an answer with Deprecation and Sunset calls onDeprecation once per operation per client', async ({ t, origin }) => {
    const pet = await t.app.petsRepository.create({ name: 'Old road', categoryId: 2 });
    const notices: DeprecationNotice[] = [];
    const { client } = clientOf(origin, keyOf(t.auth), { onDeprecation: (notice) => notices.push(notice) });

    await client.listPets({ limit: 1 });
    expect(await client.getPet(pet.id)).toEqual(pet);
    await client.getPet(pet.id);
    await expect(client.getPet(9_007_199_254_740_991)).rejects.toMatchObject({ code: 'not_found' });

    expect(notices).toEqual([
      {
        operation: 'getPet',
        deprecation: new Date('2025-12-05T00:00:00Z'),
        sunset: new Date('2030-12-05T00:00:00Z'),
        link: `${ORIGIN}/v1/openapi.json#/paths/~1pets~1{petId}/get`,
      },
    ]);
    console.log(`deprecation: 3 calls of getPet, onDeprecation called ${notices.length} time`);
  });

  test('by default, one process warning', async ({ t, origin }) => {
    const warnings = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      const pet = await t.app.petsRepository.create({ name: 'Warned', categoryId: 2 });
      const { client } = clientOf(origin, keyOf(t.auth));
      await client.getPet(pet.id);
      await client.getPet(pet.id);
      expect(warnings).toHaveBeenCalledTimes(1);
      expect(warnings).toHaveBeenCalledWith(
        expect.stringMatching(
          /^The pet store API's getPet is deprecated and will be removed on Thu, 05 Dec 2030 00:00:00 GMT; see http:\/\/127\.0\.0\.1:/,
        ),
        { type: 'DeprecationWarning', code: 'PET_STORE_DEPRECATED' },
      );
    } finally {
      warnings.mockRestore();
    }
  });
});

test('with cache on, reads revalidate with If-None-Match, a 304 is answered from the copy and costs no quota', async ({ t, origin }) => {
  const pet = await t.app.petsRepository.create({ name: 'Cached', categoryId: 4, status: 'sold' });
  const { client, exchanges } = clientOf(origin, keyOf(t.auth), { cache: { maxEntries: 10 }, onDeprecation: () => {} });

  const first = await client.listPets({ status: 'sold' });
  const afterFirst = client.rateLimit!.remaining;
  const second = await client.listPets({ status: 'sold' });
  expect(second).toEqual(first);
  expect(exchanges.map((exchange) => exchange.status)).toEqual([200, 304]);
  expect(exchanges[1]!.requestHeaders.get('if-none-match')).toBe(exchanges[0]!.headers!.get('etag'));
  expect(client.rateLimit!.remaining).toBe(afterFirst);

  await client.getPet(pet.id);
  const afterRead = client.rateLimit!.remaining;
  expect(await client.getPet(pet.id)).toEqual(pet);
  expect(exchanges.at(-1)!.status).toBe(304);
  expect(client.rateLimit!.remaining).toBe(afterRead);

  // A change is a new body: 200, and the copy replaced.
  const added = await t.app.petsRepository.create({ name: 'Cached too', categoryId: 4, status: 'sold' });
  await expect.poll(() => client.listPets({ status: 'sold' })).toContainEqual(added);
  expect(exchanges.at(-1)!.status).toBe(200);
  await client.listPets({ status: 'sold' });
  expect(exchanges.at(-1)!.status).toBe(304);

  const uncached = clientOf(origin, keyOf(t.auth));
  await uncached.client.listPets({ status: 'sold' });
  await uncached.client.listPets({ status: 'sold' });
  expect(uncached.exchanges.every((exchange) => !exchange.requestHeaders.has('if-none-match'))).toBe(true);
  console.log(
    `cache: ${exchanges.filter((exchange) => exchange.status === 304).length} of ${exchanges.length} reads answered 304 from the copy; ` +
      `X-RateLimit-Remaining unchanged by each (${afterFirst} after the first read, ${afterRead} after the pet's)`,
  );
});
