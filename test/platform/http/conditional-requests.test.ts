import { hash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { LightMyRequestResponse } from 'fastify';
import { buildTestApp, type TestApp } from '../../support/app.js';
import { POSTGRES_URL } from '../../support/databases.js';
import { eventually } from '../../support/eventually.js';
import { describeAppTest, twoInstancesTest } from '../../support/fixtures.js';
import { countPets } from '../../support/pets.js';
import { MINUTE, SUNSET, T0 } from '../../support/time.js';
import { RATE_LIMIT_STORES, REDIS_URL, redisStoreEnv, type StoreVariant } from '../../support/redis.js';
import { bearer } from '../../support/keys.js';
import { minuteAndDay } from '../../../src/plans/limits.js';

/** What a 304 must repeat of the 200 (RFC 9110 15.4.5), and what this service adds to every response. */
const REPEATED = ['etag', 'cache-control', 'x-content-type-options', 'x-ratelimit-limit', 'x-ratelimit-reset', 'ratelimit-policy'];

const STRONG_ETAG = /^"[A-Za-z0-9_-]{27}"$/;

function expectNotModified(response: LightMyRequestResponse, fresh: LightMyRequestResponse) {
  expect(response.statusCode).toBe(304);
  expect(response.body).toBe('');
  expect(response.headers['content-type']).toBeUndefined();
  expect(response.headers['content-length']).toBeUndefined();
  for (const name of REPEATED) expect(response.headers[name], name).toBe(fresh.headers[name]);
}

describe('ETag and If-None-Match', () => {
  const get = (t: TestApp, url: string, headers: Record<string, string> = {}) => t.app.inject({ url, headers: { ...t.auth, ...headers } });
  const create = (t: TestApp, name: string, status?: string) =>
    t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: { name, categoryId: 1, ...(status && { status }) } });
  // The block's app starts with five pets, created before its first test.
  const test = describeAppTest().extend('pets', { auto: true }, async ({ t }) => {
    if ((await countPets(t.db)) > 0) return;
    for (let index = 0; index < 5; index++) await create(t, `Pet ${index}`, 'available');
  });

  test('every 200 of a read carries a strong ETag and Cache-Control: private, no-cache', async ({ t }) => {
    for (const url of ['/v1/pets', '/v1/pets?limit=2', '/v1/pets?status=available', '/v1/pets/1']) {
      const response = await get(t, url);
      expect(response.statusCode).toBe(200);
      expect(response.headers.etag).toMatch(STRONG_ETAG);
      expect(response.headers['cache-control']).toBe('private, no-cache');
    }
  });

  test("304 for a matching If-None-Match: the tag itself, *, a list, or the weak form; with the 200's headers and no body", async ({
    t,
  }) => {
    const fresh = await get(t, '/v1/pets?limit=2');
    const etag = String(fresh.headers.etag);
    for (const ifNoneMatch of [etag, '*', `"other", ${etag}`, `W/${etag}`, `W/"a", W/${etag}, "b"`]) {
      const response = await get(t, '/v1/pets?limit=2', { 'if-none-match': ifNoneMatch });
      expectNotModified(response, fresh);
      expect(response.headers.link, 'the next link, as on the 200').toBe(fresh.headers.link);
    }
  });

  test('200 with the body when nothing matches', async ({ t }) => {
    const fresh = await get(t, '/v1/pets?limit=2');
    for (const ifNoneMatch of ['"other"', 'W/"other"', String(fresh.headers.etag).slice(1, -1), '']) {
      const response = await get(t, '/v1/pets?limit=2', { 'if-none-match': ifNoneMatch });
      expect(response.statusCode, ifNoneMatch).toBe(200);
      expect(response.body).toBe(fresh.body);
    }
  });

  test('GET /v1/pets/{petId}: 304 with the deprecation headers too; HEAD revalidates like GET', async ({ t }) => {
    const fresh = await get(t, '/v1/pets/1');
    const revalidated = await get(t, '/v1/pets/1', { 'if-none-match': String(fresh.headers.etag) });
    expectNotModified(revalidated, fresh);
    for (const name of ['deprecation', 'sunset', 'link']) expect(revalidated.headers[name]).toBe(fresh.headers[name]);
    const head = await t.app.inject({
      method: 'HEAD',
      url: '/v1/pets/1',
      headers: { ...t.auth, 'if-none-match': String(fresh.headers.etag) },
    });
    expect(head.statusCode).toBe(304);
    expect(head.headers.etag).toBe(fresh.headers.etag);
    expect(head.body).toBe('');
  });

  test('the ETag changes exactly when the body does: a pet added to the page changes it, one added elsewhere does not', async ({ t }) => {
    const available = await get(t, '/v1/pets?status=available&limit=100');
    const pending = await get(t, '/v1/pets?status=pending&limit=100');
    const firstTwo = await get(t, '/v1/pets?limit=2');
    const created = await create(t, 'Newcomer', 'available');
    await eventually(async () => (await get(t, '/v1/pets?status=available&limit=100')).body !== available.body);

    const availableNow = await get(t, '/v1/pets?status=available&limit=100', { 'if-none-match': String(available.headers.etag) });
    expect(availableNow.statusCode).toBe(200);
    expect(availableNow.json()).toContainEqual(created.json());
    expect(availableNow.headers.etag).not.toBe(available.headers.etag);
    // The digest of the body sent, not of the one the URL answered before (a page is digested once per version).
    for (const response of [available, availableNow]) expect(response.headers.etag).toBe(`"${hash('sha1', response.body, 'base64url')}"`);
    expectNotModified(await get(t, '/v1/pets?status=pending&limit=100', { 'if-none-match': String(pending.headers.etag) }), pending);
    expectNotModified(await get(t, '/v1/pets?limit=2', { 'if-none-match': String(firstTwo.headers.etag) }), firstTwo);
    // Different bodies, different tags: no two pages of a listing share one.
    const tags = new Set<string>();
    for (const url of ['/v1/pets?limit=1', '/v1/pets?limit=2', '/v1/pets/1', '/v1/pets/2'])
      tags.add(String((await get(t, url)).headers.etag));
    expect(tags.size).toBe(4);
  });

  test('a revalidation of a tag known to be current (one a client revalidated before) is answered before the handler: the pets are not even looked up', async ({
    t,
  }) => {
    const lookups = async () =>
      (await t.app.metricsRegistry.getSingleMetric('pets_cache_lookups_total')!.get()).values.reduce((sum, { value }) => sum + value, 0);
    const fresh = await get(t, '/v1/pets?limit=3');
    // Tags are remembered for clients that revalidate: the first revalidation runs the handler.
    expectNotModified(await get(t, '/v1/pets?limit=3', { 'if-none-match': String(fresh.headers.etag) }), fresh);
    const before = await lookups();
    for (let revalidation = 0; revalidation < 5; revalidation++) {
      expectNotModified(await get(t, '/v1/pets?limit=3', { 'if-none-match': String(fresh.headers.etag) }), fresh);
    }
    expect(await lookups()).toBe(before);
    // Anything else still reads: a 200, and a revalidation of a tag that is not current.
    await get(t, '/v1/pets?limit=3', { 'if-none-match': '"stale"' });
    expect(await lookups()).toBe(before + 1);
  });

  test('errors, creates and everything else keep no-store and get no ETag', async ({ t }) => {
    const responses = [
      await get(t, '/v1/pets/999999'),
      await get(t, '/v1/pets?limit=0', { 'if-none-match': '*' }),
      await t.app.inject({ url: '/v1/pets', headers: { 'if-none-match': '*' } }),
      await create(t, 'Fresh'),
    ];
    expect(responses.map((response) => response.statusCode)).toEqual([404, 400, 401, 201]);
    for (const response of responses) {
      expect(response.headers.etag).toBeUndefined();
      expect(response.headers['cache-control']).toBe('no-store');
    }
  });
});

describe('a tag known to be current, on a clock that stands still', () => {
  // The tag is remembered for the pets cache's TTL of the app's time: standing still, only the data version can make it stale.
  const test = describeAppTest({ clock: T0 });

  test('is stale once the data changes: its revalidation reads the page again, 200 with the new pet and a new tag', async ({ t }) => {
    const create = async (name: string) =>
      (await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: { name, categoryId: 1 } })).json();
    const get = (headers: Record<string, string> = {}) => t.app.inject({ url: '/v1/pets?limit=100', headers: { ...t.auth, ...headers } });
    await create('Before');
    const fresh = await get();
    const revalidate = () => get({ 'if-none-match': String(fresh.headers.etag) });
    expectNotModified(await revalidate(), fresh);
    expectNotModified(await revalidate(), fresh);

    const added = await create('After');
    const changed = await revalidate();
    expect(changed.statusCode).toBe(200);
    expect(changed.json()).toContainEqual(added);
    expect(changed.headers.etag).not.toBe(fresh.headers.etag);
  });
});

const twoInstances = twoInstancesTest();

describe.skipIf(!POSTGRES_URL)('ETags across two instances on PostgreSQL', () => {
  twoInstances('one body has one ETag on every instance, so a client revalidates with either', async ({ instances: { a, b } }) => {
    await a.app.inject({ method: 'POST', url: '/v1/pets', headers: a.auth, payload: { name: 'Shared', categoryId: 5 } });
    const fromA = await a.app.inject({ url: '/v1/pets', headers: a.auth });
    await eventually(async () => (await b.app.inject({ url: '/v1/pets', headers: b.auth })).body === fromA.body);
    const fromB = await b.app.inject({ url: '/v1/pets', headers: { ...b.auth, 'if-none-match': String(fromA.headers.etag) } });
    expect(fromB.statusCode).toBe(304);
    expect(fromB.headers.etag).toBe(fromA.headers.etag);
    // b now knows the tag is current; a pet added on a makes it stale on b as soon as b hears of it.
    const added = await a.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: a.auth,
      payload: { name: 'Changes the page', categoryId: 5 },
    });
    await eventually(async () => {
      const revalidated = await b.app.inject({ url: '/v1/pets', headers: { ...b.auth, 'if-none-match': String(fromA.headers.etag) } });
      return revalidated.statusCode === 200 && revalidated.json().some((pet: { id: number }) => pet.id === added.json().id);
    }, 1_500);
  });
});

// With the pets cache, a revalidation of a tag known to be current is checked and never counted;
// without it, the 304 is found after the handler and taken back from both windows.
const stores: StoreVariant[] = [
  ...RATE_LIMIT_STORES,
  ...RATE_LIMIT_STORES.map((store) => ({
    ...store,
    name: `${store.name} (no pets cache)`,
    env: () => ({ ...store.env(), PETS_CACHE_MAX_BYTES: '0' }),
  })),
];

describe.each(stores)('a 304 and the rate limit, with the $name store', (store) => {
  const test = describeAppTest({ clock: T0, envAtBuild: store.env });

  describe.skipIf(store.usesRedis && !REDIS_URL)('', () => {
    test('is admitted like any request but counts in neither window; a 200 still does', async ({ t, clock }) => {
      const { key } = await t.app.apiKeysRepository.create({ plan: 'enterprise', limits: minuteAndDay(3, 5) });
      const auth = bearer(key);
      clock.advance(MINUTE);
      const fresh = await t.app.inject({ url: '/v1/pets', headers: auth });
      expect(fresh.statusCode).toBe(200);
      expect(fresh.headers['x-ratelimit-remaining']).toBe('2');
      for (let revalidation = 0; revalidation < 10; revalidation++) {
        const response = await t.app.inject({ url: '/v1/pets', headers: { ...auth, 'if-none-match': String(fresh.headers.etag) } });
        expect(response.statusCode).toBe(304);
        expect(response.headers['x-ratelimit-remaining'], 'uncharged: as many left as before it').toBe('2');
        expect(response.headers.ratelimit).toMatch(/^"minute";r=2;t=\d+, "day";r=4;t=\d+$/);
      }
      expect((await t.app.inject({ url: '/v1/pets', headers: auth })).headers['x-ratelimit-remaining']).toBe('1');
      expect((await t.app.inject({ url: '/v1/pets', headers: auth })).headers['x-ratelimit-remaining']).toBe('0');
      // Over the limit, a revalidation is refused like anything else.
      const refused = await t.app.inject({ url: '/v1/pets', headers: { ...auth, 'if-none-match': String(fresh.headers.etag) } });
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toMatchObject({ code: 'rate_limited', status: 429 });
      // The next minute: the day window kept only the three 200s, so two requests are left today.
      clock.advance(MINUTE);
      const nextMinute = await t.app.inject({ url: '/v1/pets', headers: auth });
      expect(nextMinute.headers.ratelimit).toMatch(/"day";r=1;/);
    });

    test('a revalidation that was to be a 304 but is refused further on (410 once the sunset has come) counts', async ({ t, clock }) => {
      const { key } = await t.app.apiKeysRepository.create({ plan: 'enterprise', limits: minuteAndDay(5, 100) });
      const auth = bearer(key);
      const created = await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: { name: 'Sunset', categoryId: 1 } });
      const url = `/v1/pets/${created.json().id}`;
      // Half a second before the sunset (also the start of a minute and a day): the tag is then known for a second.
      clock.set(SUNSET - 500);
      const fresh = await t.app.inject({ url, headers: auth });
      expect(fresh.statusCode).toBe(200);
      clock.set(SUNSET);
      const gone = await t.app.inject({ url, headers: { ...auth, 'if-none-match': String(fresh.headers.etag) } });
      expect(gone.statusCode).toBe(410);
      const after = await t.app.inject({ url, headers: auth });
      expect(after.headers['x-ratelimit-remaining'], 'both 410s counted in the new minute').toBe('3');
    });
  });
});

describe.skipIf(!POSTGRES_URL || !REDIS_URL)('a 304 and the rate limit across two instances sharing Redis', () => {
  it('a 304 on one instance gives back what the count shared with the other holds', async () => {
    let clock = T0;
    const env = redisStoreEnv();
    const a = await buildTestApp(env, { now: () => clock });
    const b = await buildTestApp({ ...env, DATABASE_URL: a.databaseUrl! }, { now: () => clock });
    try {
      const { key } = await a.app.apiKeysRepository.create({ plan: 'enterprise', limits: minuteAndDay(4, 100) });
      const auth = bearer(key);
      clock += MINUTE;
      const fresh = await a.app.inject({ url: '/v1/pets', headers: auth });
      expect(fresh.headers['x-ratelimit-remaining']).toBe('3');
      for (const instance of [b, a, b, b, a]) {
        const revalidated = await instance.app.inject({
          url: '/v1/pets',
          headers: { ...auth, 'if-none-match': String(fresh.headers.etag) },
        });
        expect(revalidated.statusCode).toBe(304);
        expect(revalidated.headers['x-ratelimit-remaining']).toBe('3');
      }
      expect((await b.app.inject({ url: '/v1/pets', headers: auth })).headers['x-ratelimit-remaining']).toBe('2');
      expect((await a.app.inject({ url: '/v1/pets', headers: auth })).headers['x-ratelimit-remaining']).toBe('1');
    } finally {
      await b.close();
      await a.close();
    }
  });
});
