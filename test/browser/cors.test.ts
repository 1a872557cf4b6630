import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { describe, expect } from 'vitest';
import { browserTest, type BrowserService } from '../support/browser-service.js';
import { bearer } from '../support/keys.js';

// Issue 57: a web page on another origin calls the service with fetch in headless Chromium, and
// reads what the browser lets its script read. The service allows the shop's origin only.

/** A pet made from Node (no browser involved): the pages have something to list and fetch. */
async function createPet(service: BrowserService, key: string, name: string) {
  const response = await fetch(`${service.api}/pets`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ name, categoryId: 1, status: 'available' }),
  });
  expect(response.status).toBe(201);
  return (await response.json()) as { id: number; name: string };
}

const test = browserTest(([shop]) => [shop]).extend('world', { scope: 'file' }, async ({ service, pages: [shop, outsider] }) => {
  const key = await service.createKey({ plan: 'pro', name: 'web shop' });
  const pets = [];
  for (const name of ['Rex', 'Bella', 'Max']) pets.push(await createPet(service, key, name));
  return { service, key, pets, shop: shop!, outsider: outsider! };
});

// The file's setup (a server, Chromium, two pages, a key and pets) is no test's work: resolved before the tests.
test.beforeAll(async ({ world }) => void world, 0);

describe('a page from an allowed origin calls the service with fetch', () => {
  // First of the file: no earlier call to this URL left a preflight in the browser's cache.
  test('a create with an Idempotency-Key is preflighted, then created; sent again, replayed without a second preflight', async ({
    world: { service, key, shop },
  }) => {
    const preflight = { msg: 'preflight', method: 'OPTIONS', origin: shop.origin } as const;
    const create = { method: 'POST', route: '/v1/pets', status: 201 };
    const [preflightsBefore, createsBefore] = [await service.logged(preflight), await service.logged(create)];
    const body = { name: 'Kiwi', categoryId: 1, status: 'available' };
    const sent = { method: 'POST', key, headers: { 'idempotency-key': `browser-${randomUUID()}` }, json: body } as const;
    const created = await shop.call(`${service.api}/pets`, sent);
    expect(created).toMatchObject({ status: 201, body: { id: expect.any(Number), name: 'Kiwi' } });
    expect(created.headers).toMatchObject({
      location: expect.stringContaining(`/pets/${created.body.id}`),
      'x-request-id': expect.any(String),
    });
    // Authorization, Content-Type: application/json and Idempotency-Key: none is safelisted.
    expect(await service.logged(preflight)).toBe(preflightsBefore + 1);

    const replayed = await shop.call(`${service.api}/pets`, sent);
    expect(replayed).toMatchObject({ status: 201, headers: { 'idempotent-replayed': 'true' }, body: { id: created.body.id } });
    // Access-Control-Max-Age: the browser kept the first preflight's answer.
    expect(await service.logged(create)).toBe(createsBefore + 2);
    expect(await service.logged(preflight)).toBe(preflightsBefore + 1);
  });

  test('a listing: the script reads X-RateLimit-Limit, -Remaining and -Reset, ETag and Link, and follows the link', async ({
    world: { service, key, shop },
  }) => {
    const first = await shop.call(`${service.api}/pets?limit=1`, { key });
    expect(first).toMatchObject({ status: 200, body: [{ name: 'Rex' }] });
    expect(first.headers).toMatchObject({
      'x-ratelimit-limit': '300',
      'x-ratelimit-remaining': expect.stringMatching(/^\d+$/),
      'x-ratelimit-reset': expect.stringMatching(/^\d+$/),
      etag: expect.stringMatching(/^(W\/)?".+"$/),
      link: expect.stringContaining('rel="next"'),
      'x-request-id': expect.any(String),
    });
    const next = /<([^>]+)>;\s*rel="next"/.exec(first.headers!.link!)![1]!;
    const second = await shop.call(next, { key });
    expect(second).toMatchObject({ status: 200, body: [{ name: 'Bella' }] });
    expect(Number(second.headers!['x-ratelimit-remaining'])).toBe(Number(first.headers!['x-ratelimit-remaining']) - 1);

    // A conditional read: the 304 reaches the script too (the browser leaves a request with If-None-Match to it).
    const unchanged = await shop.call(`${service.api}/pets?limit=1`, { key, headers: { 'if-none-match': first.headers!.etag! } });
    expect(unchanged).toMatchObject({ status: 304, headers: { etag: first.headers!.etag } });
    // A plain read again: the browser revalidates its copy itself with the ETag, and the service's 304,
    // which costs nothing, reaches the script as the copy's 200 with the 304's headers.
    const again = await shop.call(`${service.api}/pets?limit=1`, { key });
    expect(again).toMatchObject({ status: 200, body: first.body, headers: { etag: first.headers!.etag } });
    expect(again.headers!['x-ratelimit-remaining']).toBe(second.headers!['x-ratelimit-remaining']);
  });

  test('401 without a key: the script reads the JSON body', async ({ world: { service, shop } }) => {
    const refused = await shop.call(`${service.api}/pets`);
    expect(refused).toMatchObject({ status: 401, body: { code: 'unauthorized', status: 401, message: expect.any(String) } });
    expect(refused.headers!['x-request-id']).toEqual(expect.any(String));
  });

  test('429 past a key’s limit: the script reads the JSON body, Retry-After and X-RateLimit-Remaining', async ({
    world: { service, shop },
  }) => {
    // Sliding: three calls in a row are refused at the third, whenever a minute begins.
    const tiny = await service.createKey({
      plan: 'free',
      name: 'two a minute',
      limits: [{ name: 'minute', limit: 2, windowSeconds: 60, algorithm: 'sliding' }],
    });
    const reads = [];
    // Not from the browser's cache: it would revalidate its copy of this URL, and a 304 costs nothing.
    for (let call = 0; call < 3; call++) reads.push(await shop.call(`${service.api}/pets?limit=1`, { key: tiny, cache: 'no-store' }));
    expect(reads.map((read) => read.status)).toEqual([200, 200, 429]);
    expect(reads[2]).toMatchObject({
      headers: { 'retry-after': expect.stringMatching(/^[1-9]\d*$/), 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '0' },
      body: { code: 'rate_limited', status: 429, message: expect.any(String) },
    });
  });

  test('the deprecated getPet: the script reads Deprecation, Sunset and Link', async ({ world: { service, key, pets, shop } }) => {
    const read = await shop.call(`${service.api}/pets/${pets[0]!.id}`, { key });
    expect(read).toMatchObject({ status: 200, body: { id: pets[0]!.id, name: 'Rex' } });
    expect(read.headers).toMatchObject({
      deprecation: expect.stringMatching(/^@\d+$/),
      sunset: expect.stringContaining('2030'),
      link: expect.stringContaining('rel="deprecation"'),
    });
  });
});

describe('a page from an origin outside CORS_ORIGINS', () => {
  test('the browser refuses it every answer: a call with a key stops at the preflight, one without reads nothing', async ({
    world: { service, key, outsider },
  }) => {
    const listing = { method: 'GET', route: '/v1/pets' };
    const [servedBefore, refusedBefore] = [
      await service.logged({ ...listing, status: 200 }),
      await service.logged({ ...listing, status: 401 }),
    ];
    expect(await outsider.call(`${service.api}/pets?limit=1`, { key })).toEqual({ error: 'TypeError: Failed to fetch' });
    // A request with no header to preflight is sent and answered (401), but the script may not read it.
    expect(await outsider.call(`${service.api}/pets`)).toEqual({ error: 'TypeError: Failed to fetch' });
    expect(await service.logged({ ...listing, status: 401 })).toBe(refusedBefore + 1);
    // The first call's preflight, logged at debug level only, got no Access-Control-Allow-Origin: the listing itself was never sent.
    expect(await service.logged({ msg: 'preflight', origin: outsider.origin })).toBe(1);
    expect(await service.logged({ ...listing, status: 200 })).toBe(servedBefore);
    // To the official client, as to any script, a refused answer is a failed network.
    expect(await outsider.useClient(service.api, key)).toEqual({
      error: expect.stringMatching(/^ConnectionError: network_error .*Failed to fetch/),
    });
  });
});

describe('the shop’s page', () => {
  // Last of the file: the page has made every call of the tests above.
  test('shows a row of what its script read for each call it made (saved as a screenshot, outside the repository)', async ({
    world: { shop },
  }) => {
    expect(shop.calls()).toBeGreaterThan(0);
    expect(await shop.rows()).toBe(shop.calls());
    const screenshot = await shop.screenshot('pet-store-browser-fetch');
    // A PNG: its signature.
    expect((await readFile(screenshot)).subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
  });
});
