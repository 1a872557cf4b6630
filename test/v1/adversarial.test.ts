import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { generateKey, hashKey } from '../../src/api-keys/format.js';
import { MAX_OVERLAP_SECONDS } from '../../src/api-keys/lifecycle.js';
import { LOOKUPS } from '../../src/rate-limit/lookup-budget.js';
import { buildTestApp } from '../support/app.js';
import { createScratchDatabase } from '../../harness/databases.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { appTest } from '../support/fixtures.js';
import { bearer, keyLookups, waitForKey, waitUntilCached, waitUntilListed } from '../support/keys.js';
import { closedWithin, openSocket, sendRaw } from '../support/raw-socket.js';
import { DAY, MINUTE, T0 } from '../support/time.js';

// What an adversarial pass against a running instance got through (issue 18), over real HTTP.
const test = appTest({ clock: Date.parse('2026-01-05T00:00:00Z'), anonymous: true })
  // A fresh day for every test: no window or ban of an earlier one is still open.
  .extend('freshDay', { auto: true }, ({ clock }) => clock.advance(DAY))
  /** A key of a plan, usable on this instance once it answers: its first request is the one that answered. */
  .extend('newKey', { scope: 'file' }, ({ t, request }) => async (plan: 'free' | 'pro' = 'free') => {
    const { key } = await t.app.apiKeysRepository.create({ plan, name: `adversary ${plan}` });
    const headers = bearer(key);
    await waitForKey(async () => (await request('GET', '/v1/pets?limit=1', { headers })).status);
    return headers;
  });

describe('If-None-Match: * holds no representation, so it revalidates nothing for free', () => {
  test('counts a 304 answered for * on a list, on a pet and on a URL the key never fetched', async ({ t, request, newKey }) => {
    const headers = await newKey();
    const { body: pet } = await request('POST', '/v1/pets', { headers: t.auth, json: { name: 'Star', categoryId: 1, status: 'sold' } });
    const urls = ['/v1/pets?limit=100', `/v1/pets/${pet.id}`, '/v1/pets?limit=1&status=sold'];
    const remaining: number[] = [];
    const statuses: number[] = [];
    // The key's first request (newKey) left 59.
    for (let i = 0; i < 59; i++) {
      const response = await request('GET', urls[i % urls.length]!, { headers: { ...headers, 'if-none-match': '*' } });
      statuses.push(response.status);
      remaining.push(Number(response.headers.get('x-ratelimit-remaining')));
    }
    // RFC 9110 13.1.2: * matches any current representation, so GET answers 304, counted as a read.
    expect(new Set(statuses)).toEqual(new Set([304]));
    expect(remaining.at(-1)).toBe(0);
    expect((await request('GET', urls[0]!, { headers: { ...headers, 'if-none-match': '*' } })).status).toBe(429);
  });

  test('still frees a revalidation with the tag the client holds', async ({ request, newKey }) => {
    const headers = await newKey();
    const first = await request('GET', '/v1/pets?limit=2', { headers });
    const etag = first.headers.get('etag')!;
    const remaining = first.headers.get('x-ratelimit-remaining');
    for (let i = 0; i < 5; i++) {
      const again = await request('GET', '/v1/pets?limit=2', { headers: { ...headers, 'if-none-match': etag } });
      expect(again.status).toBe(304);
      expect(again.headers.get('x-ratelimit-remaining')).toBe(remaining);
    }
    // A tag among others, and a weak one, are still tags the client holds.
    const listed = await request('GET', '/v1/pets?limit=2', { headers: { ...headers, 'if-none-match': `"other", W/${etag}` } });
    expect(listed.status).toBe(304);
    expect(listed.headers.get('x-ratelimit-remaining')).toBe(remaining);
  });
});

describe('made-up keys from one address do not lock out a valid key sent from it', () => {
  const madeUp = () => ({ authorization: `Bearer ${generateKey()}` });

  test('re-checking a key known valid spends nothing of the address budget for unknown keys', async ({ t, request, clock, newKey }) => {
    const valid = await newKey('pro');
    // Known on this instance once a request needs no lookup (its first may race its own change notice).
    await waitUntilCached(t.app, valid);
    // The cached entry expires (5 minutes); meanwhile the address spends its whole lookup budget.
    clock.advance(6 * MINUTE);
    for (let i = 0; i < 60; i++) expect((await request('GET', '/v1/pets?limit=1', { headers: madeUp() })).status).toBe(401);
    expect((await request('GET', '/v1/pets?limit=1', { headers: madeUp() })).status).toBe(429);
    const again = await request('GET', '/v1/pets?limit=1', { headers: valid });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
  });

  test('a banned address spends no lookups, and a valid key sent from it still works', async ({ t, request, clock, newKey }) => {
    const valid = await newKey('pro');
    // Known valid on this instance (a key it never saw valid needs a lookup, which a banned address may not spend).
    await waitUntilCached(t.app, valid);
    // Made-up keys until the address is banned (60 x 401, then 429s up to the ban threshold).
    for (let i = 0; i < 200; i++) {
      const response = await request('GET', '/v1/pets?limit=1', { headers: madeUp() });
      if (response.body?.code === 'api_key_banned') break;
    }
    expect((await request('GET', '/v1/pets?limit=1', { headers: madeUp() })).body.code).toBe('api_key_banned');
    // A new minute: the lookup budget is back, and the ban (15 minutes) still holds.
    clock.advance(6 * MINUTE);
    const before = await keyLookups(t.app);
    for (let i = 0; i < 60; i++) {
      const response = await request('GET', '/v1/pets?limit=1', { headers: madeUp() });
      expect(response.body.code).toBe('api_key_banned');
    }
    expect(await keyLookups(t.app)).toBe(before);
    expect((await request('GET', '/v1/pets?limit=1', { headers: valid })).status).toBe(200);
  });
});

describe('a valid key this instance never saw, from an address that made up keys', () => {
  const madeUp = () => ({ authorization: `Bearer ${generateKey()}` });
  /** A key as an operator makes it, which no request has presented to this instance yet. */
  const unseenKey = async (t: { app: FastifyInstance }) => {
    const { key } = await t.app.apiKeysRepository.create({ plan: 'pro', name: 'unseen' });
    await waitUntilListed(t.app, key);
    return bearer(key);
  };

  test('is looked up once the address has spent its lookups, and made-up keys are not', async ({ t, request }) => {
    const valid = await unseenKey(t);
    for (let i = 0; i < 60; i++) expect((await request('GET', '/v1/pets?limit=1', { headers: madeUp() })).status).toBe(401);
    const before = await keyLookups(t.app);
    for (let i = 0; i < 5; i++) expect((await request('GET', '/v1/pets?limit=1', { headers: madeUp() })).status).toBe(429);
    expect(await keyLookups(t.app)).toBe(before);
    const first = await request('GET', '/v1/pets?limit=1', { headers: valid });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
  });

  test('is looked up from a banned address, and made-up keys still are not', async ({ t, request }) => {
    for (let i = 0; i < 200; i++) {
      const response = await request('GET', '/v1/pets?limit=1', { headers: madeUp() });
      if (response.body?.code === 'api_key_banned') break;
    }
    const valid = await unseenKey(t);
    const before = await keyLookups(t.app);
    for (let i = 0; i < 5; i++) expect((await request('GET', '/v1/pets?limit=1', { headers: madeUp() })).body.code).toBe('api_key_banned');
    expect(await keyLookups(t.app)).toBe(before);
    const first = await request('GET', '/v1/pets?limit=1', { headers: valid });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
  });

  test('is looked up as a stored key when it is the old key of a rotation in its overlap, on an instance started after the rotation', async () => {
    // A database that a second app opens once the first has closed: a data directory of PGlite, or one of its own on PostgreSQL.
    const dir = await mkdtemp(join(tmpdir(), 'pets-rotated-'));
    const scratch = POSTGRES_URL ? await createScratchDatabase(POSTGRES_URL) : undefined;
    const database: Record<string, string> = scratch ? { DATABASE_URL: scratch.url } : { DATA_DIR: dir };
    try {
      const first = await buildTestApp(database);
      const { old, successor } = await (async () => {
        try {
          const { id, key } = await first.app.apiKeysRepository.create({ plan: 'pro', name: 'rotated' });
          return { old: key, successor: (await first.app.keyRules.rotate(id, { overlapSeconds: MAX_OVERLAP_SECONDS }))!.key };
        } finally {
          await first.close();
        }
      })();

      // Its filter comes from the database alone (no notice of these keys reached it), on a clock
      // that stands still, so the address's lookup budget cannot come back in a new minute.
      const fresh = await buildTestApp(database, { now: () => T0 });
      try {
        // The first load has finished: nothing but the load tells the filter of the successor.
        await waitUntilListed(fresh.app, successor);
        const get = (headers: { authorization: string }) =>
          fresh.app.inject({ url: '/v1/pets?limit=1', headers, remoteAddress: '192.0.2.15' });
        // The address spends every lookup it has: a key the filter does not hold is refused unread.
        for (let i = 0; i < LOOKUPS[0]!.limit; i++) expect((await get(madeUp())).statusCode).toBe(401);
        expect((await get(madeUp())).statusCode).toBe(429);
        const response = await get(bearer(old));
        expect(response.statusCode, response.body).toBe(200);
      } finally {
        await fresh.close();
      }
    } finally {
      await scratch?.drop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('is known after a bulk import, whose notice names no key', async ({ t, request }) => {
    // More than 100 keys in one statement: one notice, '*', and every instance reads the stored keys again.
    const imported = Array.from({ length: 150 }, () => generateKey());
    await t.db.query("INSERT INTO api_keys (plan, key_hash) SELECT 'free', unnest($1::bytea[])", [imported.map((key) => hashKey(key))]);
    await waitUntilListed(t.app, imported[149]!);
    for (let i = 0; i < 65; i++) await request('GET', '/v1/pets?limit=1', { headers: madeUp() });
    const first = await request('GET', '/v1/pets?limit=1', { headers: bearer(imported[149]!) });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
  });
});

describe('errors keep the status they carry', () => {
  test('answers a blocked path traversal on the docs page with its 4xx, not a 500', async ({ t, port }) => {
    const before = t.logs.entries().length;
    const response = await sendRaw(port, 'GET /docs/static/../../v1/pets HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(response.status).toBeGreaterThanOrEqual(400);
    expect(response.status).toBeLessThan(500);
    expect(JSON.parse(response.body)).toEqual({ code: expect.any(String), message: expect.any(String), status: response.status });
    expect(
      t.logs
        .entries()
        .slice(before)
        .filter((entry) => Number(entry.level) >= 50),
    ).toEqual([]);
  });
});

describe('deeply nested JSON', () => {
  const deepArrays = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
  const deepObjects = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

  test('is never a 5xx, with or without an Idempotency-Key, up to the body limit', async ({ t, request }) => {
    // 3,000 arrays deep is 6 KB; 8,000 and 2,500 objects are as deep as a 16 KiB body allows.
    for (const [label, ignored] of [
      ['arrays 3000', deepArrays(3_000)],
      ['arrays 8000', deepArrays(8_000)],
      ['objects 2500', deepObjects(2_500)],
    ] as const) {
      const body = `{"name":"Deep","categoryId":1,"ignored":${ignored}}`;
      for (const extra of [{}, { 'idempotency-key': label.replace(' ', '-') }] as Record<string, string>[]) {
        const response = await request('POST', '/v1/pets', { headers: { ...t.auth, 'content-type': 'application/json', ...extra }, body });
        expect(response.status, JSON.stringify(response.body)).toBe(201);
      }
    }
  });

  test('replays the same request however its ignored fields nest', async ({ t, request }) => {
    const headers = { ...t.auth, 'content-type': 'application/json', 'idempotency-key': 'deep-replay' };
    const first = await request('POST', '/v1/pets', { headers, body: `{"name":"Deep","categoryId":1,"x":${deepArrays(3_000)}}` });
    const again = await request('POST', '/v1/pets', { headers, body: `{"categoryId":1,"name":"Deep"}` });
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
  });
});

describe('error messages quote little of what was sent', () => {
  test('does not echo a long path outside /v1', async ({ request }) => {
    const path = `/${'a'.repeat(8_000)}`;
    const response = await request('GET', path);
    expect(response.status).toBe(404);
    expect(response.body.message.length).toBeLessThan(200);
  });

  test('does not echo a long path under /v1 either', async ({ t, request }) => {
    const response = await request('GET', `/v1/${'b'.repeat(8_000)}`, { headers: t.auth });
    expect(response.status).toBe(404);
    expect(response.body.message.length).toBeLessThan(200);
  });
});

describe('an answer sent before the request body was read', () => {
  test('closes the connection of a client without a key that trickles its body', async ({ port }) => {
    const client = await openSocket(port);
    client.socket.write('POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"na');
    await eventually(async () => client.received.includes('\r\n\r\n'));
    expect(client.received).toMatch(/^HTTP\/1\.1 401 /);
    expect(client.received.toLowerCase()).toContain('connection: close');
    expect(await closedWithin(client, 2_000)).toBe(true);
  });

  test('keeps the connection of a request whose body was read', async ({ t, port }) => {
    const client = await openSocket(port);
    const body = '{"name":"Kept","categoryId":1}';
    client.socket.write(
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: ${t.auth.authorization}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    await eventually(async () => client.received.includes('"Kept"'));
    expect(client.received).toMatch(/^HTTP\/1\.1 201 /);
    expect(await closedWithin(client, 500)).toBe(false);
    client.socket.destroy();
  });
});
