import { describe, expect, vi } from 'vitest';
import { NewPet } from '../../src/pets/schemas.js';
import { eventually } from '../support/eventually.js';
import { appTest } from '../support/fixtures.js';
import { countPets } from '../support/pets.js';
import type { HttpResponse } from '../support/http.js';

const BASE = 'https://api.example.test/v1';

/** The app, with `create` (POST /v1/pets over HTTP) and `walk` (follows rel="next" links from a first page to the end). */
const test = appTest()
  .extend(
    'create',
    { scope: 'file' },
    ({ request }) =>
      (json: unknown) =>
        request('POST', '/v1/pets', { json }),
  )
  .extend('walk', { scope: 'file' }, ({ request }) => async (firstPath: string, onPage?: () => Promise<void>) => {
    const seen: number[] = [];
    let path: string | undefined = firstPath;
    while (path) {
      const page = await request('GET', path);
      expect(page.status).toBe(200);
      seen.push(...page.body.map((pet: { id: number }) => pet.id));
      const next = page.headers.get('link')?.match(/^<([^>]+)>; rel="next"$/)?.[1];
      path = next?.slice(BASE.length - '/v1'.length);
      await onPage?.();
    }
    return seen;
  });

function expectError(response: HttpResponse, status: number, code: string, mentions?: string) {
  expect(response.status).toBe(status);
  expect(response.headers.get('content-type')).toMatch(/^application\/json/);
  expect(response.body).toEqual({ code, message: expect.any(String), status });
  if (mentions) expect(response.body.message).toContain(mentions);
}

describe('POST /v1/pets', () => {
  test('201: adds an animal and returns it with its id and Location', async ({ request, create }) => {
    const response = await create({ name: 'Rex', categoryId: 7, status: 'available' });
    expect(response.status).toBe(201);
    expect(response.body).toEqual({ id: expect.any(Number), name: 'Rex', categoryId: 7, status: 'available' });
    expect(response.headers.get('location')).toBe(`${BASE}/pets/${response.body.id}`);
    const fetched = await request('GET', `/v1/pets/${response.body.id}`);
    expect(fetched.body).toEqual(response.body);
  });

  test('201: a pet created without status has no status field and matches no status filter', async ({ request, create, walk }) => {
    const { body } = await create({ name: 'Nameless status', categoryId: 1 });
    expect(body).not.toHaveProperty('status');
    expect((await request('GET', `/v1/pets/${body.id}`)).body).not.toHaveProperty('status');
    for (const status of ['available', 'pending', 'sold']) {
      const ids = await walk(`/v1/pets?limit=100&status=${status}`);
      expect(ids).not.toContain(body.id);
    }
    expect(await walk('/v1/pets?limit=100')).toContain(body.id);
  });

  test('counts a name in characters: 255 emoji are fine', async ({ create }) => {
    const response = await create({ name: '🐕'.repeat(255), categoryId: 1 });
    expect(response.status).toBe(201);
    expect(response.body.name).toBe('🐕'.repeat(255));
  });

  test('a name needs one visible character; invisible ones and direction marks are fine beside it', async ({ create }) => {
    // Arabic with a right-to-left mark, a soft hyphen, an emoji joined by zero-width joiners, a lone combining accent.
    for (const name of ['\u200fمشمش', 'Re\u00adx', '\u3164Rex', '👩\u200d👩\u200d👧', '\u0301']) {
      const response = await create({ name, categoryId: 1 });
      expect(response.status, JSON.stringify(name)).toBe(201);
      expect(response.body.name).toBe(name);
    }
  });

  test("the invisible characters are white space, the controls, Unicode's Default_Ignorable_Code_Point and U+2800, no more, no fewer", () => {
    const { pattern } = NewPet.properties.name;
    const name = new RegExp(pattern!);
    const invisible = /[\s\p{Cc}\p{Default_Ignorable_Code_Point}\u2800]/u;
    const refused = /[\p{Cc}\u202a-\u202e\u2066-\u2069]/u;
    const wrong: string[] = [];
    for (let codePoint = 0; codePoint <= 0x10ffff; codePoint++) {
      if (codePoint >= 0xd800 && codePoint <= 0xdfff) continue;
      const character = String.fromCodePoint(codePoint);
      if (name.test(character) !== !(invisible.test(character) || refused.test(character))) wrong.push(codePoint.toString(16));
    }
    expect(wrong).toEqual([]);
  });

  test('beside a visible character, the refused characters are the controls and the bidi embeddings, overrides and isolates, to the last of each range', () => {
    const name = new RegExp(NewPet.properties.name.pattern!);
    const refused = /[\p{Cc}\u202a-\u202e\u2066-\u2069]/u;
    // Every character, so every range's ends and their neighbours; alone, U+2066-2069 are invisible too and prove nothing.
    const wrong: string[] = [];
    for (let codePoint = 0; codePoint <= 0x10ffff; codePoint++) {
      if (codePoint >= 0xd800 && codePoint <= 0xdfff) continue;
      const character = String.fromCodePoint(codePoint);
      if (name.test(`x${character}`) === refused.test(character)) wrong.push(codePoint.toString(16));
    }
    expect(wrong).toEqual([]);
  });

  test('accepts the edges: 255 characters, categoryId 2^53 - 1, unknown fields ignored', async ({ create }) => {
    const name = 'é'.repeat(250) + '😀 🐕';
    const response = await create({ name, categoryId: 9007199254740991, status: 'sold', color: 'brown', id: 1 });
    expect(response.status).toBe(201);
    expect(response.body).toEqual({ id: expect.any(Number), name, categoryId: 9007199254740991, status: 'sold' });
  });

  test.for([
    ['name missing', { categoryId: 1 }, 'body/name'],
    ['categoryId missing', { name: 'Rex' }, 'body/categoryId'],
    ['empty name', { name: '', categoryId: 1 }, 'body/name'],
    ['blank name', { name: ' \t\n ', categoryId: 1 }, 'body/name'],
    ['name of 256 characters', { name: 'x'.repeat(256), categoryId: 1 }, 'body/name'],
    ['name of 256 emoji', { name: '🐕'.repeat(256), categoryId: 1 }, 'body/name'],
    ['name with NUL', { name: 'Re\u0000x', categoryId: 1 }, 'body/name'],
    ['name with a lone surrogate', { name: 'Re\ud800x', categoryId: 1 }, 'body/name'],
    ['name of a zero-width space', { name: '\u200b', categoryId: 1 }, 'body/name'],
    ['name of Hangul fillers', { name: '\u3164\u115f\u1160\uffa0', categoryId: 1 }, 'body/name'],
    ['name of soft hyphens and a word joiner', { name: '\u00ad\u00ad\u2060', categoryId: 1 }, 'body/name'],
    ['name of blank braille and spaces', { name: ' \u2800 ', categoryId: 1 }, 'body/name'],
    ['name of tag characters', { name: '\udb40\udc52\udb40\udc65\udb40\udc78', categoryId: 1 }, 'body/name'],
    ['name with a right-to-left override', { name: 'Rex\u202egod', categoryId: 1 }, 'body/name'],
    ['name with a bidi isolate', { name: '\u2067Rex\u2069', categoryId: 1 }, 'body/name'],
    ['name with a tab', { name: 'Re\tx', categoryId: 1 }, 'body/name'],
    ['name with a C1 control', { name: 'Re\u009bx', categoryId: 1 }, 'body/name'],
    ['name as number', { name: 123, categoryId: 1 }, 'body/name'],
    ['categoryId as string', { name: 'Rex', categoryId: '12' }, 'body/categoryId'],
    ['categoryId zero', { name: 'Rex', categoryId: 0 }, 'body/categoryId'],
    ['categoryId negative', { name: 'Rex', categoryId: -3 }, 'body/categoryId'],
    ['categoryId fractional', { name: 'Rex', categoryId: 1.5 }, 'body/categoryId'],
    ['categoryId past 2^53 - 1', { name: 'Rex', categoryId: 9007199254740992 }, 'body/categoryId'],
    ['status null', { name: 'Rex', categoryId: 1, status: null }, 'body/status'],
    ['unknown status', { name: 'Rex', categoryId: 1, status: 'adopted' }, 'body/status'],
    ['an array', [{ name: 'Rex', categoryId: 1 }], 'body'],
    ['a string', 'Rex', 'body'],
  ] as Array<[string, unknown, string]>)('400 and nothing stored: %s', async ([, json, field], { t, create }) => {
    const before = await countPets(t.db);
    expectError(await create(json), 400, 'bad_request', field);
    expect(await countPets(t.db)).toBe(before);
  });

  test.for([
    ['a missing field is said to be required', { name: 'Rex' }, 'body/categoryId is required'],
    ['every missing field is named', {}, 'body/name, body/categoryId are required'],
    ['a missing field is named before a wrong one', { name: 7 }, 'body/categoryId is required'],
  ] as Array<[string, unknown, string]>)('400: %s', async ([, json, message], { create }) => {
    const response = await create(json);
    expectError(response, 400, 'bad_request');
    expect(response.body.message).toBe(message);
  });

  test('400: missing, empty or malformed JSON body', async ({ t, request }) => {
    const before = await countPets(t.db);
    expectError(await request('POST', '/v1/pets'), 400, 'bad_request', 'body');
    const json = { 'content-type': 'application/json' };
    expectError(await request('POST', '/v1/pets', { headers: json, body: '' }), 400, 'bad_request');
    expectError(await request('POST', '/v1/pets', { headers: json, body: '{"name": "Rex",' }), 400, 'bad_request');
    expect(await countPets(t.db)).toBe(before);
  });

  test('415: a content type other than JSON', async ({ request }) => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const response = await request('POST', '/v1/pets', { headers: { 'content-type': type }, body: 'name=Rex&categoryId=1' });
      expectError(response, 415, 'unsupported_media_type');
    }
  });

  test('413: a body over 16 KiB', async ({ create }) => {
    const response = await create({ name: 'Rex', categoryId: 1, padding: 'x'.repeat(16 * 1024) });
    expectError(response, 413, 'payload_too_large');
  });

  test('200 concurrent creates give 200 distinct ids, all stored', async ({ t, create }) => {
    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, i) => create({ name: `pet ${i}`, categoryId: 1 + (i % 5), status: 'pending' })),
    );
    expect(responses.every((response) => response.status === 201)).toBe(true);
    const ids = responses.map((response) => response.body.id as number);
    expect(new Set(ids).size).toBe(200);
    const stored = await t.db.query<{ id: number }>('SELECT id FROM pets WHERE id = ANY($1)', [ids]);
    expect(stored).toHaveLength(200);
  });

  test('one row the database refuses among 60 concurrent creates fails alone: 1 refused, 59 created', async ({ t, create }) => {
    await t.db.query(`CREATE FUNCTION refuse_in_batch() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.name = 'Refused in a batch' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$`);
    await t.db.query('CREATE TRIGGER refuse_in_batch BEFORE INSERT ON pets FOR EACH ROW EXECUTE FUNCTION refuse_in_batch()');
    const creates = vi.spyOn(t.app.petsRepository, 'create');
    try {
      // A transaction locks the table until all 60 creates have reached the repository: the first
      // two INSERTs wait on it (on PGlite, on its one connection) and the other 58, the refused
      // one among them, queue for one multi-row INSERT, which the database fails as a whole.
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let locked!: () => void;
      const isLocked = new Promise<void>((resolve) => (locked = resolve));
      const holder = t.db.transaction(async (tx) => {
        await tx.query('LOCK TABLE pets IN SHARE MODE');
        locked();
        await released;
      });
      await isLocked;
      const names = Array.from({ length: 60 }, (_, i) => (i === 30 ? 'Refused in a batch' : `Batched ${i}`));
      const responses = Promise.all(names.map((name) => create({ name, categoryId: 1 })));
      try {
        await eventually(async () => creates.mock.calls.length === 60);
      } finally {
        release();
        await holder;
      }
      const statuses = (await responses).map(({ status }) => status);
      expect(names.filter((_, i) => statuses[i] !== 201)).toEqual(['Refused in a batch']);
      expectError((await responses)[30]!, 500, 'internal_error');
      const stored = await t.db.query<{ name: string }>('SELECT name FROM pets WHERE name = ANY($1)', [names]);
      expect(stored).toHaveLength(59);
    } finally {
      creates.mockRestore();
      await t.db.query('DROP TRIGGER refuse_in_batch ON pets');
      await t.db.query('DROP FUNCTION refuse_in_batch()');
    }
  });
});

describe('GET /v1/pets/{petId}', () => {
  test('200: the animal', async ({ request, create }) => {
    const { body } = await create({ name: 'Fetch me', categoryId: 2, status: 'pending' });
    const response = await request('GET', `/v1/pets/${body.id}`);
    expect(response.status).toBe(200);
    expect(response.body).toEqual(body);
  });

  test('404: no animal with that identifier', async ({ request }) => {
    expectError(await request('GET', '/v1/pets/9007199254740991'), 404, 'not_found');
  });

  test.for(['abc', '0', '-1', '1.5', '9007199254740992', '1e3', '%20'])('400: petId %s', async (petId, { request }) => {
    expectError(await request('GET', `/v1/pets/${petId}`), 400, 'bad_request', 'params/petId');
  });
});

describe('GET /v1/pets', () => {
  test('200: default limit 20, in id order, with a next link', async ({ request, create }) => {
    for (let i = 0; i < 25; i++) await create({ name: `list ${i}`, categoryId: 3, status: 'available' });
    const response = await request('GET', '/v1/pets');
    expect(response.status).toBe(200);
    expect(response.body).toHaveLength(20);
    const ids = response.body.map((pet: { id: number }) => pet.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(response.headers.get('link')).toMatch(new RegExp(`^<${BASE}/pets\\?limit=20&cursor=[A-Za-z0-9_-]+>; rel="next"$`));
  });

  test('200: limit 1 and 100, and the status filter', async ({ request }) => {
    expect((await request('GET', '/v1/pets?limit=1')).body).toHaveLength(1);
    const hundred = await request('GET', '/v1/pets?limit=100&status=available');
    expect(hundred.status).toBe(200);
    expect(hundred.body.length).toBeGreaterThan(20);
    expect(hundred.body.every((pet: { status: string }) => pet.status === 'available')).toBe(true);
    const filtered = await request('GET', '/v1/pets?limit=1&status=available');
    expect(filtered.headers.get('link')).toMatch(
      new RegExp(`^<${BASE}/pets\\?limit=1&status=available&cursor=[A-Za-z0-9_-]+>; rel="next"$`),
    );
  });

  test('pages reach every pet exactly once, and the last page has no next link', async ({ t, walk }) => {
    const all = (await t.db.query<{ id: number }>('SELECT id FROM pets ORDER BY id')).map((row) => row.id);
    expect(await walk('/v1/pets?limit=7')).toEqual(all);
    const available = (await t.db.query<{ id: number }>("SELECT id FROM pets WHERE status = 'available' ORDER BY id")).map((row) => row.id);
    expect(await walk('/v1/pets?limit=3&status=available')).toEqual(available);
  });

  test('no pet is skipped or repeated while another client inserts', async ({ t, create, walk }) => {
    const before = (await t.db.query<{ id: number }>('SELECT id FROM pets ORDER BY id')).map((row) => row.id);
    let inserted = 0;
    const seen = await walk('/v1/pets?limit=9', async () => {
      await Promise.all([1, 2, 3].map(() => create({ name: `concurrent ${inserted++}`, categoryId: 4 })));
    });
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.slice(0, before.length)).toEqual(before);
    expect(seen.length).toBeGreaterThan(before.length);
  });

  test.for(['0', '101', '-1', '1.5', 'abc', '', '20&limit=30'])('400: limit=%s', async (limit, { request }) => {
    expectError(await request('GET', `/v1/pets?limit=${limit}`), 400, 'bad_request', 'querystring/limit');
  });

  test('400: unknown status', async ({ request }) => {
    expectError(await request('GET', '/v1/pets?status=adopted'), 400, 'bad_request', 'querystring/status');
  });

  test('400: a malformed cursor, or one made for another status filter', async ({ request }) => {
    for (const cursor of ['garbage!', 'Zm9vYmFy', Buffer.from(':0').toString('base64url'), 'x'.repeat(300)]) {
      expectError(await request('GET', `/v1/pets?cursor=${cursor}`), 400, 'bad_request', 'cursor');
    }
    const first = await request('GET', '/v1/pets?limit=1&status=available');
    const cursor = first.headers.get('link')!.match(/cursor=([^>]+)>/)![1];
    expect((await request('GET', `/v1/pets?limit=1&status=available&cursor=${cursor}`)).status).toBe(200);
    expectError(await request('GET', `/v1/pets?limit=1&status=sold&cursor=${cursor}`), 400, 'bad_request', 'status');
    expectError(await request('GET', `/v1/pets?limit=1&cursor=${cursor}`), 400, 'bad_request', 'status');
  });
});

describe('every other request gets an Error body', () => {
  test('404: unknown routes', async ({ request }) => {
    expectError(await request('GET', '/v1/orders'), 404, 'not_found');
    expectError(await request('GET', '/pets'), 404, 'not_found');
  });

  test('405: unsupported methods, with Allow', async ({ request }) => {
    const onList = await request('DELETE', '/v1/pets');
    expectError(onList, 405, 'method_not_allowed');
    expect(onList.headers.get('allow')).toBe('GET, POST, HEAD');
    const onPet = await request('PUT', '/v1/pets/1', { json: { name: 'x', categoryId: 1 } });
    expectError(onPet, 405, 'method_not_allowed');
    expect(onPet.headers.get('allow')).toBe('GET, HEAD');
  });

  test('logs one line per request with id, method, route, status and duration', async ({ t, request }) => {
    await request('GET', '/v1/pets?limit=2');
    const line = t.logs.entries().findLast((entry) => entry.msg === 'request');
    expect(line).toMatchObject({ reqId: expect.any(String), method: 'GET', route: '/v1/pets', status: 200, ms: expect.any(Number) });
  });
});
