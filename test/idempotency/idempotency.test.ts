import { randomUUID } from 'node:crypto';
import { describe, expect } from 'vitest';
import type { LightMyRequestResponse } from 'fastify';
import { buildTestApp, type TestApp } from '../support/app.js';
import { appTest, twoInstancesTest } from '../support/fixtures.js';
import { insertInFlight, POSTGRES_URL } from '../support/databases.js';
import { countPets } from '../support/pets.js';
import { eventually } from '../support/eventually.js';
import { bearer } from '../support/keys.js';
import { MINUTE, T0 } from '../support/time.js';
import { createIdempotencyKeysRepository } from '../../src/idempotency/repository.js';
import { minuteAndDay } from '../../src/plans/limits.js';

const newKey = () => `retry-${randomUUID()}`;

/** POST /v1/pets with the key (none when undefined); a string payload is sent as it is, as JSON. */
function post(t: TestApp, key: string | undefined, payload: object | string, headers: Record<string, string> = t.auth) {
  return t.app.inject({
    method: 'POST',
    url: '/v1/pets',
    headers: { ...headers, 'content-type': 'application/json', ...(key !== undefined && { 'idempotency-key': key }) },
    body: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });
}

/** Adds stored responses of the app's own API key, created `age` ago, under keys named prefix-1, prefix-2... */
async function addStoredKeys(t: TestApp, count: number, age: string, prefix: string) {
  await t.db.query(
    `INSERT INTO idempotency_keys (api_key_id, key, request_hash, status, body, created_at)
     SELECT (SELECT min(id) FROM api_keys), $1 || '-' || n, 'h', 201, '{}', now() - $2::interval FROM generate_series(1, $3::int) AS n`,
    [prefix, age, count],
  );
}

const storedKeys = async (t: TestApp, prefix: string) =>
  (await t.db.query<{ count: number }>("SELECT count(*)::int AS count FROM idempotency_keys WHERE key LIKE $1 || '-%'", [prefix]))[0]!
    .count;

const expectError = (response: LightMyRequestResponse, status: number, code: string) => {
  expect(response.statusCode, response.body).toBe(status);
  expect(response.json()).toMatchObject({ code, status });
};

/** A key of its own, recognised by the app, with the given limits. */
async function keyFor(t: TestApp, options: { perMinute?: number; readOnly?: boolean } = {}) {
  const { key } = await t.app.apiKeysRepository.create({
    plan: 'enterprise',
    limits: minuteAndDay(options.perMinute ?? 1_000, 100_000),
    readOnly: options.readOnly,
  });
  return bearer(key);
}

const test = appTest({ clock: T0 });
const twoInstances = twoInstancesTest();

describe('Idempotency-Key on POST /v1/pets', () => {
  test('a retry gets the first response again (status, body, Location) with Idempotent-Replayed, and adds nothing', async ({ t }) => {
    const key = newKey();
    const first = await post(t, key, { name: 'Once', categoryId: 3, status: 'available' });
    expect(first.statusCode).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    for (let retry = 0; retry < 3; retry++) {
      const again = await post(t, key, { name: 'Once', categoryId: 3, status: 'available' });
      expect(again.statusCode).toBe(201);
      expect(again.body).toBe(first.body);
      expect(again.headers.location).toBe(first.headers.location);
      expect(again.headers['idempotent-replayed']).toBe('true');
    }
    expect(await countPets(t.db, 'Once')).toBe(1);
  });

  test('accepts the key as a structured-field string or bare: "k" and k are one key, escapes unquoted', async ({ t }) => {
    const key = newKey();
    const bare = await post(t, key, { name: 'Forms', categoryId: 1 });
    const quoted = await post(t, `"${key}"`, { name: 'Forms', categoryId: 1 });
    expect(quoted.headers['idempotent-replayed']).toBe('true');
    expect(quoted.body).toBe(bare.body);

    const escaped = await post(t, '"a\\"b\\\\c"', { name: 'Escaped', categoryId: 1 });
    const unescaped = await post(t, 'a"b\\c', { name: 'Escaped', categoryId: 1 });
    expect(escaped.statusCode).toBe(201);
    expect(unescaped.headers['idempotent-replayed']).toBe('true');
    expect(await countPets(t.db, 'Escaped')).toBe(1);

    const longest = await post(t, 'k'.repeat(255), { name: 'Longest', categoryId: 1 });
    expect(longest.statusCode).toBe(201);
  });

  test('400 bad_request for a malformed key, and nothing is stored under it', async ({ t }) => {
    for (const malformed of ['""', 'k'.repeat(256), `"${'k'.repeat(256)}"`, 'a b', '"a b"', '"open', '"bad\\escape"', 'caf\u00e9']) {
      const response = await post(t, malformed, { name: 'Malformed', categoryId: 1 });
      expectError(response, 400, 'bad_request');
      expect(response.json().message).toMatch(/^headers\/idempotency-key must be 1 to 255 visible ASCII characters/);
    }
    expect(await countPets(t.db, 'Malformed')).toBe(0);
  });

  test('422 idempotency_key_mismatch for the same key with a different body; formatting, key order and unknown fields do not make it different', async ({
    t,
  }) => {
    const key = newKey();
    expect((await post(t, key, { name: 'Same', categoryId: 2, status: 'sold' })).statusCode).toBe(201);
    const reformatted = await post(t, key, '{ "status" : "sold",\n "categoryId": 2, "name": "Same", "colour": "brown" }');
    expect(reformatted.headers['idempotent-replayed']).toBe('true');
    for (const other of [
      { name: 'Same', categoryId: 3, status: 'sold' },
      { name: 'Same', categoryId: 2 },
      { name: 'Other', categoryId: 2, status: 'sold' },
    ]) {
      const response = await post(t, key, other);
      expectError(response, 422, 'idempotency_key_mismatch');
      expect(response.headers['idempotent-replayed']).toBeUndefined();
    }
    expect(await countPets(t.db, 'Other')).toBe(0);
  });

  test('belongs to the API key: the same idempotency key under another API key is another key', async ({ t }) => {
    const key = newKey();
    const other = await keyFor(t);
    const mine = await post(t, key, { name: 'Scoped', categoryId: 1 });
    const theirs = await post(t, key, { name: 'Scoped', categoryId: 1 }, other);
    expect(theirs.statusCode).toBe(201);
    expect(theirs.headers['idempotent-replayed']).toBeUndefined();
    expect(theirs.json().id).not.toBe(mine.json().id);
    // And a different body under their key is theirs to send.
    expect((await post(t, newKey(), { name: 'Scoped', categoryId: 9 }, other)).statusCode).toBe(201);
    expect(await countPets(t.db, 'Scoped')).toBe(3);
  });

  test('a request refused before it runs (400, 401, 403, 413, 415, 429) stores nothing: the key then runs normally', async ({
    t,
    clock,
  }) => {
    const key = newKey();
    expectError(await post(t, key, { name: '', categoryId: 1 }), 400, 'bad_request');
    expectError(await post(t, key, { name: 'Refused', categoryId: 1 }, { authorization: 'Bearer psk_wrong' }), 401, 'unauthorized');
    expectError(await post(t, key, { name: 'Refused', categoryId: 1 }, await keyFor(t, { readOnly: true })), 403, 'forbidden');
    expectError(await post(t, key, JSON.stringify({ name: 'x'.repeat(20_000), categoryId: 1 })), 413, 'payload_too_large');
    const unsupported = await t.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...t.auth, 'idempotency-key': key, 'content-type': 'text/plain' },
      body: 'Refused',
    });
    expectError(unsupported, 415, 'unsupported_media_type');

    const limited = await keyFor(t, { perMinute: 1 });
    expect((await t.app.inject({ url: '/v1/pets?limit=1', headers: limited })).statusCode).toBe(200);
    expectError(await post(t, key, { name: 'Refused', categoryId: 1 }, limited), 429, 'rate_limited');
    clock.advance(MINUTE);
    const afterLimit = await post(t, key, { name: 'Refused later', categoryId: 1 }, limited);
    expect(afterLimit.statusCode).toBe(201);
    expect(afterLimit.headers['idempotent-replayed']).toBeUndefined();

    const ran = await post(t, key, { name: 'Refused', categoryId: 1 });
    expect(ran.statusCode).toBe(201);
    expect(ran.headers['idempotent-replayed']).toBeUndefined();
    expect(await countPets(t.db, 'Refused')).toBe(1);
  });

  test('a request that fails with a 5xx stores nothing: its retry with the same key creates the pet', async ({ t }) => {
    // A real failure inside the transaction: the database refuses this one name, then stops refusing.
    await t.db.query(`CREATE FUNCTION refuse_doomed() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.name = 'Doomed' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$`);
    await t.db.query('CREATE TRIGGER refuse_doomed BEFORE INSERT ON pets FOR EACH ROW EXECUTE FUNCTION refuse_doomed()');
    const key = newKey();
    try {
      const failed = await post(t, key, { name: 'Doomed', categoryId: 1 });
      expectError(failed, 500, 'internal_error');
      expect(failed.body).not.toContain('refused for the test');
    } finally {
      await t.db.query('DROP TRIGGER refuse_doomed ON pets');
      await t.db.query('DROP FUNCTION refuse_doomed()');
    }
    const retried = await post(t, key, { name: 'Doomed', categoryId: 1 });
    expect(retried.statusCode).toBe(201);
    expect(retried.headers['idempotent-replayed']).toBeUndefined();
    expect(await countPets(t.db, 'Doomed')).toBe(1);
  });

  test('a replay counts against the rate limit like any request', async ({ t, clock }) => {
    const auth = await keyFor(t, { perMinute: 3 });
    clock.advance(MINUTE);
    const key = newKey();
    const first = await post(t, key, { name: 'Counted', categoryId: 1 }, auth);
    const replay = await post(t, key, { name: 'Counted', categoryId: 1 }, auth);
    expect(first.headers['x-ratelimit-remaining']).toBe('2');
    expect(replay.headers['x-ratelimit-remaining']).toBe('1');
    expect(replay.headers['idempotent-replayed']).toBe('true');
    await post(t, key, { name: 'Counted', categoryId: 1 }, auth);
    expectError(await post(t, key, { name: 'Counted', categoryId: 1 }, auth), 429, 'rate_limited');
  });

  test('a key with no Idempotency-Key header creates a pet per request, as before', async ({ t }) => {
    await post(t, undefined, { name: 'Twice', categoryId: 1 });
    await post(t, undefined, { name: 'Twice', categoryId: 1 });
    expect(await countPets(t.db, 'Twice')).toBe(2);
  });

  test('keys older than the retention are purged, in batches, and younger ones kept', async ({ t }) => {
    await addStoredKeys(t, 1_200, '25 hours', 'old');
    await addStoredKeys(t, 1, '23 hours', 'young');
    expect(await createIdempotencyKeysRepository(t.db, 'api').purge(24)).toBe(1_200);
    expect(await storedKeys(t, 'old')).toBe(0);
    expect(await storedKeys(t, 'young')).toBe(1);
  });
});

describe.skipIf(!POSTGRES_URL)('Idempotency-Key across two instances on PostgreSQL', () => {
  twoInstances(
    'twenty concurrent POSTs with one key, ten on each instance, create exactly one pet; the others replay it or are told to retry (409)',
    async ({ instances }) => {
      const { a, b } = instances;
      const key = newKey();
      const responses = await Promise.all(
        Array.from({ length: 20 }, (_, index) => post(index % 2 ? b : a, key, { name: 'Concurrent', categoryId: 7 }, a.auth)),
      );
      expect(await countPets(a.db, 'Concurrent')).toBe(1);
      const created = responses.filter((response) => response.statusCode === 201);
      expect(created.filter((response) => response.headers['idempotent-replayed'] === undefined)).toHaveLength(1);
      expect(new Set(created.map((response) => response.body)).size).toBe(1);
      for (const response of responses.filter((one) => one.statusCode !== 201)) {
        expectError(response, 409, 'idempotency_key_in_use');
        expect(response.headers['retry-after']).toBe('1');
      }
      // Every client that was told to retry gets the one pet when it does.
      const retried = await post(b, key, { name: 'Concurrent', categoryId: 7 }, a.auth);
      expect(retried.body).toBe(created[0]!.body);
    },
  );

  twoInstances(
    '409 idempotency_key_in_use while the first request is in flight on the other instance, then the replay',
    async ({ instances }) => {
      const { a, b } = instances;
      // The database takes a second over this one name, so the first request is surely in flight.
      await a.db.query(`CREATE FUNCTION slow_pet() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.name = 'Slow' THEN PERFORM pg_sleep(1); END IF; RETURN NEW; END $$`);
      await a.db.query('CREATE TRIGGER slow_pet BEFORE INSERT ON pets FOR EACH ROW EXECUTE FUNCTION slow_pet()');
      try {
        const key = newKey();
        const first = post(a, key, { name: 'Slow', categoryId: 1 });
        await insertInFlight(a.db);
        const during = await post(b, key, { name: 'Slow', categoryId: 1 }, a.auth);
        expectError(during, 409, 'idempotency_key_in_use');
        expect(during.headers['retry-after']).toBe('1');
        expect((await first).statusCode).toBe(201);
        const after = await post(b, key, { name: 'Slow', categoryId: 1 }, a.auth);
        expect(after.headers['idempotent-replayed']).toBe('true');
        expect(after.body).toBe((await first).body);
      } finally {
        await a.db.query('DROP TRIGGER slow_pet ON pets');
        await a.db.query('DROP FUNCTION slow_pet()');
      }
    },
  );

  twoInstances(
    'a response stored on one instance is replayed by the other, and by an instance started afterwards',
    async ({ instances }) => {
      const { a, b } = instances;
      const key = newKey();
      const first = await post(a, key, { name: 'Durable', categoryId: 4, status: 'pending' });
      const elsewhere = await post(b, key, { name: 'Durable', categoryId: 4, status: 'pending' }, a.auth);
      expect(elsewhere.headers['idempotent-replayed']).toBe('true');
      expect(elsewhere.body).toBe(first.body);
      const restarted = await buildTestApp({ DATABASE_URL: a.databaseUrl! });
      try {
        const later = await post(restarted, key, { name: 'Durable', categoryId: 4, status: 'pending' }, a.auth);
        expect(later.statusCode).toBe(201);
        expect(later.headers['idempotent-replayed']).toBe('true');
        expect(later.body).toBe(first.body);
        expect(later.headers.location).toBe(first.headers.location);
      } finally {
        await restarted.close();
      }
      expect(await countPets(a.db, 'Durable')).toBe(1);
    },
  );

  twoInstances('a pet created with a key is seen at once by a listing on the instance that created it', async ({ instances }) => {
    const { a } = instances;
    // Fill the cache with the listing's last page, then create through the transactional path.
    const before = await a.app.inject({ url: '/v1/pets?limit=100&status=sold', headers: a.auth });
    expect(before.statusCode).toBe(200);
    const created = await post(a, newKey(), { name: 'Seen', categoryId: 1, status: 'sold' });
    let page = await a.app.inject({ url: '/v1/pets?limit=100&status=sold', headers: a.auth });
    while (page.headers.link) {
      const next = /<[^>]*\/v1(\/pets[^>]*)>/.exec(String(page.headers.link))![1]!;
      page = await a.app.inject({ url: `/v1${next}`, headers: a.auth });
    }
    expect(page.json()).toContainEqual(created.json());
  });

  twoInstances('a new instance purges expired keys once it is ready', async ({ instances }) => {
    const { a } = instances;
    await addStoredKeys(a, 600, '25 hours', 'expired');
    const started = await buildTestApp({ DATABASE_URL: a.databaseUrl! });
    try {
      await eventually(async () => (await storedKeys(a, 'expired')) === 0);
      expect(started.logs.entries().some((entry) => entry.msg === 'idempotency keys purged' && entry.purged === 600)).toBe(true);
    } finally {
      await started.close();
    }
  });
});
