import type { FastifyInstance } from 'fastify';
import { describe } from 'vitest';
import { CSV_TYPE } from '../../src/usage/admin-routes.js';
import { adminFixture, type TestAdmin } from '../support/admin.js';
import { appTest, expect } from '../support/fixtures.js';
import { bearer } from '../support/keys.js';
import { DAY, MINUTE, T0 } from '../support/time.js';
import { csvOf, type UsageRow } from '../support/usage-csv.js';

const HOUR = 60 * MINUTE;

const test = appTest({ clock: T0, env: { USAGE_RETENTION_DAYS: '3000' } }).extend('admin', { scope: 'file' }, adminFixture);

const iso = (time: number) => new Date(time).toISOString();
/** The operations the seeded rows count: '' is the requests that matched none. */
const OPERATIONS = ['', 'createPet', 'listPets'];

type Row = UsageRow;

/** A customer with two keys, and an hour of each key's usage of each operation at each of `hours` (ms): the rows' counts. */
async function seed(app: FastifyInstance, name: string, hours: number[]) {
  const [customer] = await app.db.query<{ id: number }>('INSERT INTO customers (external_id) VALUES ($1) RETURNING id', [name]);
  const customerId = customer!.id;
  const keyIds: number[] = [];
  for (let i = 0; i < 2; i++) keyIds.push((await app.apiKeysRepository.create({ plan: 'free', customerId })).record.id);
  const seeded = hours.flatMap((hour, h) =>
    keyIds.flatMap((keyId, k) =>
      OPERATIONS.map((operation, o) => ({ hour, keyId, operation, requests: 1 + ((h + k + o) % 5), credits: h % 2 })),
    ),
  );
  await app.db.query(
    `INSERT INTO usage_hours (hour, key_id, customer_id, operation, requests, units, refused_credits)
     SELECT hour, key_id, $1, operation, requests, 2 * requests, credits
     FROM unnest($2::timestamptz[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[]) AS s(hour, key_id, operation, requests, credits)`,
    [
      customerId,
      seeded.map((row) => iso(row.hour)),
      seeded.map((row) => row.keyId),
      seeded.map((row) => row.operation),
      seeded.map((row) => row.requests),
      seeded.map((row) => row.credits),
    ],
  );
  return { customerId, seeded };
}

/** The rows the admin API answers for the seeded hours: summed per bucket (and group), in order. */
function expected(seeded: Awaited<ReturnType<typeof seed>>['seeded'], granularity: 'hour' | 'day', groupBy?: 'key' | 'operation') {
  const rows = new Map<string, Row>();
  for (const { hour, keyId, operation, requests, credits } of seeded) {
    const start = iso(granularity === 'day' ? Math.floor(hour / DAY) * DAY : hour);
    const group = groupBy === 'key' ? { keyId } : groupBy === 'operation' ? { operation: operation || null } : {};
    const id = `${start} ${JSON.stringify(group)}`;
    const row = rows.get(id) ?? {
      start,
      ...group,
      requests: 0,
      units: 0,
      refused: { rateLimited: 0, concurrency: 0, credits: 0, banned: 0 },
    };
    row.requests += requests;
    row.units += 2 * requests;
    row.refused.credits += credits;
    rows.set(id, row);
  }
  const order = (row: Row) => `${row.start} ${String(row.keyId ?? '').padStart(20, '0')} ${row.operation ?? ''}`;
  return [...rows.values()].sort((a, b) => (order(a) < order(b) ? -1 : 1));
}

const get = (admin: TestAdmin, url: string, accept?: string) =>
  admin.server.inject({ url, headers: { ...bearer(admin.read.token), ...(accept && { accept }) } });

/** Every JSON page of the query, following rel="next": the rows, and each page's size. */
async function walk(admin: TestAdmin, query: string) {
  const rows: Row[] = [];
  const sizes: number[] = [];
  for (let url: string | undefined = `/admin/v1/usage?${query}`; url;) {
    const response = await get(admin, url);
    expect(response.statusCode, response.body).toBe(200);
    const page = response.json<Row[]>();
    rows.push(...page);
    sizes.push(page.length);
    url = /^<([^>]+)>; rel="next"$/.exec(String(response.headers.link ?? ''))?.[1];
  }
  return { rows, sizes };
}

describe('GET /admin/v1/usage in pages', () => {
  test('JSON in pages of `limit` rows (1,000 by default) with a rel="next" Link; CSV the whole range in one stream, the same rows byte for byte', async ({
    t,
    admin,
  }) => {
    // 400 hours in a row from 20:00: 2,400 rows of the record.
    const first = Date.UTC(2026, 5, 1, 20);
    const { customerId, seeded } = await seed(
      t.app,
      'cus_pages',
      Array.from({ length: 400 }, (_, h) => first + h * HOUR),
    );
    const range = `customerId=${customerId}&start=${iso(first - 20 * HOUR)}&end=${iso(first - 20 * HOUR + 30 * DAY)}`;
    const cases: Array<['hour' | 'day', 'key' | 'operation' | undefined, number | undefined, number[]]> = [
      ['hour', 'operation', undefined, [1_000, 200]],
      ['hour', 'key', 300, [300, 300, 200]],
      ['hour', undefined, 150, [150, 150, 100]],
      ['day', 'operation', 7, [7, 7, 7, 7, 7, 7, 7, 5]],
      ['day', 'key', 40, [36]],
    ];
    for (const [granularity, groupBy, limit, sizes] of cases) {
      const query = `${range}&granularity=${granularity}${groupBy ? `&groupBy=${groupBy}` : ''}`;
      const rows = expected(seeded, granularity, groupBy);
      const pages = await walk(admin, `${query}${limit ? `&limit=${limit}` : ''}`);
      expect({ query, sizes: pages.sizes }).toEqual({ query, sizes });
      expect(pages.rows).toEqual(rows);
      const csv = await get(admin, `/admin/v1/usage?${query}`, 'text/csv');
      expect(csv.statusCode).toBe(200);
      expect(csv.headers['content-type']).toBe(CSV_TYPE);
      expect(csv.body, query).toBe(csvOf(rows, groupBy));
    }
    // An unmatched route's operation: null in JSON, an empty field in CSV.
    const csv = await get(admin, `/admin/v1/usage?${range}&groupBy=operation`, 'text/csv');
    expect(csv.body.split('\r\n')[1]).toBe(`${iso(first)},,3,6,0,0,0,0`);
  });

  test('a sparse range: the rows after the cursor, however far; an empty range one page without a Link', async ({ t, admin }) => {
    // Hours 300 hours apart, farther than a read's window of hours.
    const first = Date.UTC(2026, 0, 1, 5);
    const hours = Array.from({ length: 6 }, (_, h) => first + h * 300 * HOUR);
    const { customerId, seeded } = await seed(t.app, 'cus_sparse', hours);
    const range = `customerId=${customerId}&start=${iso(first)}&end=${iso(first + 200 * DAY)}`;
    const pages = await walk(admin, `${range}&limit=1`);
    expect(pages.sizes).toEqual([1, 1, 1, 1, 1, 1]);
    expect(pages.rows).toEqual(expected(seeded, 'hour'));
    const keyed = await walk(admin, `${range}&groupBy=key&limit=5`);
    expect(keyed.sizes).toEqual([5, 5, 2]);
    expect(keyed.rows).toEqual(expected(seeded, 'hour', 'key'));
    const empty = await get(admin, `/admin/v1/usage?customerId=${customerId}&start=2025-01-01T00:00:00Z&end=2026-01-01T00:00:00Z&limit=1`);
    expect(empty.json()).toEqual([]);
    expect(empty.headers.link).toBeUndefined();
    expect(
      (await get(admin, `/admin/v1/usage?customerId=${customerId}&start=2025-01-01T00:00:00Z&end=2026-01-01T00:00:00Z`, 'text/csv')).body,
    ).toBe(csvOf([]));
  });

  test('a 400 naming the field: a cursor not ours or of another query, a limit out of range, a cursor or limit with CSV', async ({
    t,
    admin,
  }) => {
    const first = Date.UTC(2026, 2, 1);
    const { customerId } = await seed(t.app, 'cus_cursors', [first, first + HOUR]);
    const range = `customerId=${customerId}&start=${iso(first)}&end=${iso(first + DAY)}`;
    const page = await get(admin, `/admin/v1/usage?${range}&groupBy=key&limit=1`);
    const cursor = new URL(/^<([^>]+)>/.exec(String(page.headers.link))![1]!, 'http://x').searchParams.get('cursor')!;
    const forged = (text: string) => Buffer.from(text).toString('base64url');
    const refusals: Array<[string, string, string?]> = [
      [`${range}&groupBy=key&cursor=nonsense`, 'querystring/cursor is not a cursor from a rel="next" link'],
      [`${range}&groupBy=operation&cursor=${cursor}`, 'querystring/cursor was made for another query'],
      [
        `${range.replace(iso(first + DAY), iso(first + 2 * DAY))}&groupBy=key&cursor=${cursor}`,
        'querystring/cursor was made for another query',
      ],
      [
        `${range}&groupBy=key&cursor=${forged(`${Buffer.from(cursor, 'base64url').toString().split(':')[0]}:0:1`)}`,
        'querystring/cursor is not',
      ],
      [`${range}&limit=0`, 'querystring/limit must be an integer from 1 to 5000'],
      [`${range}&limit=5001`, 'querystring/limit must be an integer from 1 to 5000'],
      [`${range}&groupBy=key&cursor=${cursor}`, 'querystring/cursor pages JSON; CSV is the whole range in one stream', 'text/csv'],
      [`${range}&limit=10`, 'querystring/limit pages JSON', 'text/csv'],
    ];
    for (const [query, message, accept] of refusals) {
      const answer = await get(admin, `/admin/v1/usage?${query}`, accept);
      expect({ query, status: answer.statusCode }).toEqual({ query, status: 400 });
      expect(answer.json()).toEqual({ code: 'bad_request', status: 400, message: expect.stringContaining(message) });
    }
    // The cursor with its own query, a page size of its own: the rest.
    const rest = await get(admin, `/admin/v1/usage?${range}&groupBy=key&limit=10&cursor=${cursor}`);
    expect(rest.statusCode).toBe(200);
    expect(rest.json()).toHaveLength(3);
  });
});
