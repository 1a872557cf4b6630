import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Database } from '../../src/platform/db/database.js';
import { buildMetricsServer } from '../../src/platform/observability/metrics-server.js';
import { cachedPetsRepository } from '../../src/pets/pets-cache.js';
import { createPetsRepository } from '../../src/pets/repository.js';
import { buildTestApp, type TestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { appTest, databaseTest as databaseFixtures, twoInstancesTest } from '../support/fixtures.js';
import { eventually } from '../support/eventually.js';
import { T0 } from '../support/time.js';

const NEW_PET = { name: 'Cached', categoryId: 1, status: 'available' };

async function lookups(t: TestApp, kind: 'list' | 'pet', outcome: 'hit' | 'miss'): Promise<number> {
  const text = (await buildMetricsServer(t.app.metricsRegistry).inject('/metrics')).body;
  return Number(new RegExp(`^pets_cache_lookups_total\\{kind="${kind}",outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
}

// A clock that stands still: a page is served for PETS_CACHE_TTL_MS (1 s) of the app's time, which
// a loaded machine can let pass between two requests of a test that counts hits.
const test = appTest({ clock: T0 });
const databaseTest = databaseFixtures();
const twoInstances = twoInstancesTest();

describe('the pets cache on one instance', () => {
  // The app is built before the tests: a file-scoped fixture is set up within the first test that
  // uses it, whose 60 s a build on PGlite overran on a loaded machine. Unbounded: the build ends on its own.
  test.beforeAll(async ({ t }) => void t, 0);
  const get = (t: TestApp, url: string) => t.app.inject({ url, headers: t.auth });
  const create = async (t: TestApp, pet: object = NEW_PET) =>
    (await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: pet })).json();

  test('reads its writes: after a 201, every list and get includes the pet, and a miss is never kept', async ({ t }) => {
    const first = await create(t);
    expect((await get(t, `/v1/pets/${first.id + 1}`)).statusCode).toBe(404);
    const before = (await get(t, '/v1/pets?limit=100&status=available')).json();
    await get(t, '/v1/pets?limit=100&status=available');
    const second = await create(t);
    expect(second.id).toBe(first.id + 1);
    expect((await get(t, `/v1/pets/${second.id}`)).json()).toEqual(second);
    expect((await get(t, '/v1/pets?limit=100&status=available')).json()).toEqual([...before, second]);
    const unfiltered = (await get(t, '/v1/pets?limit=100')).json();
    expect(unfiltered.at(-1)).toEqual(second);
  });

  test('keeps a full page cached while pets are added after it, and counts hits and misses', async ({ t }) => {
    const early = [];
    for (let i = 0; i < 6; i++) early.push(await create(t, { name: `Early ${i}`, categoryId: 2 }));
    // Their notices come back through the database a moment later and would drop a page read in
    // between (harmless, one more miss, but this test counts hits). A notice sent after them
    // arrives after them; it is known to have landed once a pet found before it is missed again,
    // since only such a notice (a flush) forgets a pet found. The data version would not tell:
    // their own notices move it too.
    const known = `/v1/pets/${early[0].id}`;
    await get(t, known);
    const petMisses = await lookups(t, 'pet', 'miss');
    await t.db.query("SELECT pg_notify('pets_changed', '*')");
    await eventually(async () => (await get(t, known), (await lookups(t, 'pet', 'miss')) > petMisses));
    const page = (await get(t, '/v1/pets?limit=3')).json();
    const hits = await lookups(t, 'list', 'hit');
    await create(t);
    expect((await get(t, '/v1/pets?limit=3')).json()).toEqual(page);
    expect(await lookups(t, 'list', 'hit')).toBe(hits + 1);
    expect(await lookups(t, 'list', 'miss')).toBeGreaterThan(0);
  });

  test('forgets what an operator changes straight in the table', async ({ t }) => {
    const pet = await create(t);
    expect((await get(t, `/v1/pets/${pet.id}`)).json().name).toBe('Cached');
    await t.db.query("UPDATE pets SET name = 'Renamed' WHERE id = $1", [pet.id]);
    // The clock stands still, so only the table's notice can make the cache forget.
    await eventually(async () => (await get(t, `/v1/pets/${pet.id}`)).json().name === 'Renamed');
  });
});

describe('the pets cache as a component, over a real database', () => {
  let queries = 0;
  /** The database, counting the queries sent through it. */
  const counted = (db: Database): Database => ({ ...db, query: (statement, params) => (queries++, db.query(statement, params)) });

  databaseTest('answers identical concurrent reads with one query', async ({ database: target }) => {
    const cache = cachedPetsRepository(createPetsRepository(counted(target.db)), { maxBytes: 1e6, ttlMs: 1_000, now: Date.now });
    queries = 0;
    const pages = await Promise.all(Array.from({ length: 20 }, () => cache.list({ limit: 10 })));
    expect(queries).toBe(1);
    expect(new Set(pages).size).toBe(1);
  });

  databaseTest('neither joins nor keeps a read that began before a create', async ({ database: target }) => {
    const repository = createPetsRepository(target.db);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let readDone!: () => void;
    const firstReadDone = new Promise<void>((resolve) => (readDone = resolve));
    let reads = 0;
    const cache = cachedPetsRepository(
      {
        ...repository,
        // The first read is held back, once it has read, until the create below has committed.
        list: async (query) => {
          const page = await repository.list(query);
          if (reads++ === 0) {
            readDone();
            await gate;
          }
          return page;
        },
      },
      { maxBytes: 1e6, ttlMs: 60_000, now: Date.now },
    );
    const early = cache.list({ limit: 100 });
    await firstReadDone;
    const pet = await cache.create({ name: 'Late', categoryId: 1 });
    const late = await cache.list({ limit: 100 });
    expect(late.pets.at(-1)).toEqual(pet);
    release();
    expect((await early).pets.map(({ id }) => id)).not.toContain(pet.id);
    expect((await cache.list({ limit: 100 })).pets.at(-1)).toEqual(pet);
    expect(reads).toBe(2);
  });

  databaseTest('keeps no read a create overtook: with no read in between, the next list has the new pet', async ({ database: target }) => {
    const repository = createPetsRepository(target.db);
    const [{ top }] = (await target.db.query<{ top: number | null }>('SELECT max(id)::int AS top FROM pets')) as [{ top: number | null }];
    const query = { limit: 100, afterId: top ?? 0 };
    let read!: () => void;
    const readDone = new Promise<void>((resolve) => (read = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let reads = 0;
    const cache = cachedPetsRepository(
      {
        ...repository,
        // The first read has its page from the database, then is held until the create below has committed.
        list: async (listQuery) => {
          const page = await repository.list(listQuery);
          if (reads++ === 0) {
            read();
            await gate;
          }
          return page;
        },
      },
      { maxBytes: 1e6, ttlMs: 60_000, now: Date.now },
    );
    const early = cache.list(query);
    await readDone;
    const pet = await cache.create({ name: 'Overtaking', categoryId: 1 });
    release();
    // The read began before the create and finished after it: it does not have the pet.
    expect((await early).pets.map(({ id }) => id)).not.toContain(pet.id);
    // The very next list on this instance, no other read in between, must not be answered from it.
    expect((await cache.list(query)).pets).toEqual([pet]);
    expect(reads).toBe(2);
  });

  databaseTest(
    'property: any sequence of pages and creates is answered exactly as the database answers it',
    async ({ database: target }) => {
      const repository = createPetsRepository(target.db);
      const status = fc.constantFrom<'available' | 'pending' | 'sold' | undefined>(undefined, 'available', 'pending', 'sold');
      const step = fc.oneof(
        // Few cursors and limits, so that pages repeat, overlap, meet and end exactly at the end of the table.
        fc.record({ kind: fc.constant('list' as const), limit: fc.integer({ min: 1, max: 6 }), status, after: fc.nat(12) }),
        fc.record({ kind: fc.constant('list' as const), limit: fc.integer({ min: 1, max: 6 }), status, after: fc.nat(12) }),
        fc.record({ kind: fc.constant('create' as const), status }),
      );
      let checked = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 40 }), async (steps) => {
          const cache = cachedPetsRepository(repository, { maxBytes: 1e6, ttlMs: 60_000, now: Date.now });
          const [{ top }] = (await target.db.query<{ top: number | null }>('SELECT max(id)::int AS top FROM pets')) as [
            { top: number | null },
          ];
          for (const current of steps) {
            if (current.kind === 'create') {
              await cache.create({ name: 'Walked', categoryId: 1, ...(current.status && { status: current.status }) });
              continue;
            }
            // Cursors near the end of the table, where creates land and runs meet.
            const query = { limit: current.limit, status: current.status, afterId: Math.max(0, (top ?? 0) - current.after) };
            expect(await cache.list(query)).toEqual(await repository.list(query));
            checked++;
          }
        }),
        { numRuns: 100 },
      );
      expect(checked).toBeGreaterThan(300);
    },
  );

  databaseTest('stays within its bytes, whatever is read', async ({ database: target }) => {
    const repository = createPetsRepository(target.db);
    for (let i = 0; i < 50; i++) await repository.create({ name: 'x'.repeat(200), categoryId: 1 });
    const cache = cachedPetsRepository(repository, { maxBytes: 50_000, ttlMs: 60_000, now: Date.now });
    for (let limit = 1; limit <= 100; limit++) await cache.list({ limit });
    for (let id = 1; id <= 60; id++) await cache.findById(id);
    expect(cache.size().bytes).toBeLessThanOrEqual(50_000);
    expect(cache.size().entries).toBeGreaterThan(0);
  });

  databaseTest('serves an entry no longer than its lifetime', async ({ database: target }) => {
    let clock = 0;
    const cache = cachedPetsRepository(createPetsRepository(counted(target.db)), { maxBytes: 1e6, ttlMs: 1_000, now: () => clock });
    queries = 0;
    await cache.list({ limit: 7 });
    clock = 999;
    await cache.list({ limit: 7 });
    expect(queries).toBe(1);
    clock = 1_000;
    await cache.list({ limit: 7 });
    expect(queries).toBe(2);
  });
});

describe('the cache can be turned off', () => {
  it('PETS_CACHE_MAX_BYTES=0: no cache and no cache metrics, the same answers', async () => {
    const t = await buildTestApp({ PETS_CACHE_MAX_BYTES: '0' });
    try {
      const created = (await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: NEW_PET })).json();
      expect((await t.app.inject({ url: `/v1/pets/${created.id}`, headers: t.auth })).json()).toEqual(created);
      expect((await buildMetricsServer(t.app.metricsRegistry).inject('/metrics')).body).not.toContain('pets_cache');
    } finally {
      await t.close();
    }
  });
});

describe.runIf(POSTGRES_URL)('several instances on one database', () => {
  const lastPet = async (t: TestApp) => (await t.app.inject({ url: '/v1/pets?limit=100', headers: t.auth })).json().at(-1);

  twoInstances(
    'a pet created on one appears in the listings of the other within a second, milliseconds as a rule',
    async ({ instances: { a, b } }) => {
      const created = (await a.app.inject({ method: 'POST', url: '/v1/pets', headers: a.auth, payload: NEW_PET })).json();
      await lastPet(b);
      const next = (await a.app.inject({ method: 'POST', url: '/v1/pets', headers: a.auth, payload: NEW_PET })).json();
      expect(next.id).toBeGreaterThan(created.id);
      const ms = await eventually(async () => (await lastPet(b))?.id === next.id, 1_000);
      console.log(`a pet created on instance A was listed by instance B after ${ms} ms`);
    },
  );

  twoInstances('so does a row an operator inserts straight into the table', async ({ instances: { a, b } }) => {
    await lastPet(a);
    await lastPet(b);
    const [row] = await a.db.query<{ id: number }>("INSERT INTO pets (name, category_id) VALUES ('By hand', 1) RETURNING id");
    await eventually(async () => (await lastPet(a))?.id === row!.id && (await lastPet(b))?.id === row!.id, 1_000);
  });

  twoInstances('and still within a second after the listening connections were cut and came back', async ({ instances: { a, b } }) => {
    await lastPet(b);
    await a.db.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database()");
    const created = (await a.app.inject({ method: 'POST', url: '/v1/pets', headers: a.auth, payload: NEW_PET })).json();
    await eventually(async () => (await lastPet(b))?.id === created.id, 1_000);
  });
});
