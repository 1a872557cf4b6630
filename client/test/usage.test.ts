// The client's getUsage against the real service (buildTestApp, over loopback HTTP): the key's own
// usage record or its customer's, every page of it followed.
import type { FastifyInstance } from 'fastify';
import { appTest, expect } from '../../test/support/fixtures.js';
import { insertCustomer } from '../../test/support/customers.js';
import { keyInFreshWindows } from '../../test/support/keys.js';
import { DAY, MINUTE, T0, type TestClock } from '../../test/support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';
import { createUsageRepository } from '../../src/usage/repository.js';
import { BadRequestError, PetStoreClient, type UsageRow } from '../src/index.js';
import { recordingFetch } from './support.js';

const HOUR = 60 * MINUTE;
const iso = (time: number) => new Date(time).toISOString();
const none = { rateLimited: 0, concurrency: 0, credits: 0, banned: 0 };

const test = appTest({ clock: T0 });

/** A client of a new key of the app (of `customerId` when given), recording its traffic. */
async function clientOf(app: FastifyInstance, clock: TestClock, port: number, customerId?: number) {
  const { headers, quotaId } = await keyInFreshWindows(app, clock, { plan: 'enterprise', limits: minuteAndDay(1_000, 10_000), customerId });
  const recorded = recordingFetch();
  const apiKey = headers.authorization.slice('Bearer '.length);
  // A first key's id is its quota's.
  return {
    client: new PetStoreClient({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey, fetch: recorded.fetch }),
    keyId: quotaId,
    ...recorded,
  };
}

test("getUsage: the key's own rows, by hour, operation or day, and its customer's with scope customer", async ({ t, clock, port }) => {
  const customerId = await insertCustomer(t.app.db, 'cus_client_usage');
  const mine = await clientOf(t.app, clock, port, customerId);
  const sibling = await clientOf(t.app, clock, port, customerId);
  const stranger = await clientOf(t.app, clock, port);
  // A day none of the keys has used yet.
  clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + 10 * HOUR);
  const hour = clock.now();

  await mine.client.listPets({ limit: 1 });
  await mine.client.createPet({ name: 'Counted', categoryId: 1 });
  await sibling.client.listPets({ limit: 1 });
  await stranger.client.listPets({ limit: 1 });
  clock.advance(HOUR);
  await t.app.usage.flush();

  const range = { start: new Date(hour), end: new Date(hour + HOUR) };
  const own: UsageRow[] = await mine.client.getUsage(range);
  expect(own).toEqual([{ start: iso(hour), requests: 2, units: 2, refused: none }]);
  expect(await mine.client.getUsage({ ...range, groupBy: 'operation' })).toEqual([
    { start: iso(hour), operation: 'createPet', requests: 1, units: 1, refused: none },
    { start: iso(hour), operation: 'listPets', requests: 1, units: 1, refused: none },
  ]);
  expect(await mine.client.getUsage({ ...range, scope: 'customer' })).toEqual([{ start: iso(hour), requests: 3, units: 3, refused: none }]);
  expect(await stranger.client.getUsage(range)).toEqual([{ start: iso(hour), requests: 1, units: 1, refused: none }]);

  // By day, with the bounds as strings: the reads above count too, each a request of no units.
  await t.app.usage.flush();
  const day = Math.floor(hour / DAY) * DAY;
  expect(await mine.client.getUsage({ start: iso(day), end: iso(day + DAY), granularity: 'day' })).toEqual([
    { start: iso(day), requests: 5, units: 2, refused: none },
  ]);
  expect(mine.exchanges.filter((exchange) => new URL(exchange.url).pathname === '/v1/usage').map((exchange) => exchange.url)).toEqual([
    `http://127.0.0.1:${port}/v1/usage?start=${encodeURIComponent(iso(hour))}&end=${encodeURIComponent(iso(hour + HOUR))}`,
    expect.stringContaining('&groupBy=operation'),
    expect.stringContaining('&scope=customer'),
    expect.stringContaining('&granularity=day'),
  ]);

  // The service's refusal of a range is a BadRequestError; a Date that is no time is refused before anything is sent.
  const sent = mine.exchanges.length;
  const refused = await mine.client.getUsage({ start: iso(hour + MINUTE), end: iso(hour + HOUR) }).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(BadRequestError);
  expect(refused).toMatchObject({
    status: 400,
    code: 'bad_request',
    message: 'querystring/start must be a whole hour (UTC), as the buckets are',
  });
  await expect(mine.client.getUsage({ start: new Date(Number.NaN), end: range.end })).rejects.toThrow(
    new TypeError('start must be a valid Date or an ISO 8601 date-time string'),
  );
  expect(mine.exchanges).toHaveLength(sent + 1);
});

test('getUsage follows every page the service links, in order', async ({ t, clock, port }) => {
  const { client, keyId, exchanges } = await clientOf(t.app, clock, port);
  const first = (Math.floor(clock.now() / DAY) + 1) * DAY;
  // 1,500 hours of the record, more than a page (1,000 rows) holds: written by the record's own repository.
  const hours = Array.from({ length: 1_500 }, (_, index) => first + index * HOUR);
  await createUsageRepository(t.app.db).add(
    hours.map((hour, index) => ({
      hour,
      keyId,
      customerId: null,
      operation: 'listPets',
      requests: index + 1,
      units: index + 1,
      refused: none,
    })),
  );

  const rows = await client.getUsage({ start: new Date(first), end: new Date(first + 1_500 * HOUR) });
  expect(rows.map((row) => [row.start, row.requests])).toEqual(hours.map((hour, index) => [iso(hour), index + 1]));
  expect(exchanges.map((exchange) => exchange.status)).toEqual([200, 200]);
  expect(new URL(exchanges[1]!.url).searchParams.get('cursor')).toEqual(expect.any(String));
});
