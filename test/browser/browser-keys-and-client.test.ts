import { readFile } from 'node:fs/promises';
import { describe, expect } from 'vitest';
import { browserTest } from '../support/browser-service.js';

// Issue 57: a browser key bound to the shop's origin, and the official client imported as an ES
// module by a page, in headless Chromium. The service allows both the shop and a partner.

const test = browserTest((origins) => origins).extend('world', { scope: 'file' }, ({ service, pages: [shop, partner] }) => ({
  service,
  shop: shop!,
  partner: partner!,
}));

// The file's setup (a server, Chromium, two pages) is no test's work: resolved before the tests.
test.beforeAll(async ({ world }) => void world, 0);

describe('a browser key, bound to the shop’s origin', () => {
  test('is served from the shop’s page, and refused 403 origin_not_allowed from the partner’s (which CORS allows)', async ({
    world: { service, shop, partner },
  }) => {
    const key = await service.createKey({ plan: 'free', name: 'shop front', readOnly: true, allowedOrigins: [shop.origin] });
    const served = await shop.call(`${service.api}/pets?limit=1`, { key });
    expect(served).toMatchObject({ status: 200, headers: { 'x-ratelimit-limit': expect.stringMatching(/^\d+$/) } });

    const refused = await partner.call(`${service.api}/pets?limit=1`, { key });
    expect(refused).toMatchObject({
      status: 403,
      body: { code: 'origin_not_allowed', status: 403, message: expect.stringContaining(partner.origin) },
    });
  });
});

describe('the official client, imported by the page from /client/index.js', () => {
  test('createPet(), listPets() and getRateLimit() work unchanged; the client reads the limits from the exposed headers', async ({
    world: { service, shop },
  }) => {
    const key = await service.createKey({ plan: 'pro', name: 'client in a page' });
    const read = await shop.useClient(service.api, key);
    expect(read.error).toBeUndefined();
    expect(read.body).toMatchObject({
      created: 'Pixel',
      pets: expect.arrayContaining(['Pixel']),
      // client.rateLimit: undefined unless X-RateLimit-* were readable; the create and the listing spent 2.
      rateLimit: { limit: 300, remaining: 298, reset: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) },
      plan: 'pro',
      windows: expect.arrayContaining([expect.stringMatching(/^minute \d+\/300$/)]),
    });

    const screenshot = await shop.screenshot('pet-store-browser-client');
    // A PNG: its signature.
    expect((await readFile(screenshot)).subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
  });
});
