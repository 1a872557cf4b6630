import { describe, expect, it } from 'vitest';
import { generateKey, hashKey } from '../../src/api-keys/format.js';
import { buildTestApp } from '../support/app.js';
import { POSTGRES_URL } from '../support/databases.js';
import { eventually } from '../support/eventually.js';
import { describeAppTest } from '../support/fixtures.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { sleep } from '../support/time.js';

// Runs on PostgreSQL and on PGlite alike: the triggers are the same SQL, and so is every instance's handling of their notices.
const DATABASE = POSTGRES_URL ? 'PostgreSQL' : 'PGlite';

describe(`notices of key changes (${DATABASE})`, () => {
  /**
   * The block's app, and `noticesOf`, which runs a statement and answers the notices it sent, as
   * a listener of the test's own on the app's database hears them; `everyPayload` is every notice
   * it heard.
   */
  const test = describeAppTest().extend('watch', async ({ t }, { onCleanup }) => {
    const marker = String((await t.app.apiKeysRepository.create({ plan: 'free', name: 'marker' })).id);
    const notices: string[] = [];
    const everyPayload: string[] = [];
    const stopListening = await t.db.listen(
      'api_key_changed',
      (payload) => notices.push(payload) && everyPayload.push(payload),
      () => {},
    );
    onCleanup(stopListening);

    /** Until the notices of every statement so far have arrived: one more statement's notice marks the end. */
    async function settle() {
      const from = notices.length;
      await t.db.query('UPDATE api_keys SET name = name WHERE id = $1', [Number(marker)]);
      await eventually(async () => notices.indexOf(marker, from) !== -1, 2_000);
    }

    /** The notices one statement sends. */
    async function noticesOf(sql: string): Promise<string[]> {
      await settle();
      notices.length = 0;
      await t.db.query(sql);
      await settle();
      return notices.slice(0, -1);
    }
    return { noticesOf, everyPayload };
  });

  test('is one per statement: the changed ids, "*" past 100, none when no row changed; never a hash', async ({
    watch: { noticesOf, everyPayload },
  }) => {
    const few = await noticesOf(
      "INSERT INTO api_keys (plan, key_hash) SELECT 'free', sha256(('few ' || i)::bytea) FROM generate_series(1, 3) i",
    );
    expect(few).toHaveLength(1);
    const ids = few[0]!.split(',').map(Number);
    expect(ids).toHaveLength(3);
    expect(await noticesOf(`UPDATE api_keys SET name = 'renamed' WHERE id IN (${ids.join(',')})`)).toEqual([ids.join(',')]);
    expect(await noticesOf(`DELETE FROM api_keys WHERE id = ${ids[0]}`)).toEqual([String(ids[0])]);
    expect(await noticesOf("UPDATE api_keys SET name = 'nobody' WHERE id < 0")).toEqual([]);
    expect(
      await noticesOf("INSERT INTO api_keys (plan, key_hash) SELECT 'free', sha256(('many ' || i)::bytea) FROM generate_series(1, 101) i"),
    ).toEqual(['*']);
    for (const payload of everyPayload) expect(payload).toMatch(/^(\*|\d+(,\d+)*)$/);
  });

  test('an import of 50,000 keys in one statement is one notice, and the instance stays responsive and current', async ({
    t,
    watch: { noticesOf },
  }) => {
    const { id, key } = await t.app.apiKeysRepository.create({ plan: 'pro' });
    await waitForKeyOnApp(t.app, bearer(key));
    const imported = await noticesOf(
      "INSERT INTO api_keys (plan, key_hash) SELECT 'free', sha256(('imported ' || i)::bytea) FROM generate_series(1, 50000) i",
    );
    expect(imported).toEqual(['*']);
    const fresh = await t.app.apiKeysRepository.create({ plan: 'pro' });
    await waitForKeyOnApp(t.app, bearer(fresh.key), 1_000);
    await t.app.keyRules.revoke(id);
    await eventually(async () => (await t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) })).statusCode === 401, 1_000);
  });
});

describe(`a transaction of many one-row changes while many keys are cached (${DATABASE})`, () => {
  const CACHED = 5_000;
  const STATEMENTS = 30_000;

  // Its work is fixed (the statements run by PGlite in this process, when that is the database), and
  // its wall time grows with whatever else the machine runs: nothing in it waits on a clock.
  const WORK_TIMEOUT_MS = 5 * 60_000;

  it(
    'keeps the instance answering, keys created or revoked right after take effect, and it closes promptly',
    { timeout: WORK_TIMEOUT_MS },
    async () => {
      const t = await buildTestApp();
      let probing = true;
      let probe: Promise<void> | undefined;
      let closed = false;
      try {
        // Keys in use, each looked up once as a request's authentication looks it up (a request per
        // key through the whole pipeline was most of this test's time, minutes on a loaded machine).
        const keys = Array.from({ length: CACHED }, generateKey);
        await t.db.query("INSERT INTO api_keys (plan, key_hash) SELECT 'pro', h FROM unnest($1::bytea[]) AS h", [keys.map(hashKey)]);
        for (let i = 0; i < CACHED; i += 50) {
          const found = await Promise.all(keys.slice(i, i + 50).map((key) => t.app.keyCache.lookUp(hashKey(key).toString('base64'), key)));
          expect(found.filter((identity) => identity === undefined)).toEqual([]);
        }
        const get = (key: string) => t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) });
        expect((await get(keys[2]!)).statusCode).toBe(200);

        // When /healthz was answered, in this process's CPU time: the work the instance did between two
        // answers, which the machine's other load does not stretch as it stretches the wall clock.
        const cpuMs = () => {
          const { user, system } = process.cpuUsage();
          return (user + system) / 1_000;
        };
        const answered: number[] = [];
        probe = (async () => {
          while (probing) {
            expect((await t.app.inject('/healthz')).statusCode).toBe(200);
            answered.push(cpuMs());
            await sleep(10);
          }
        })();
        // An import written as a loop of INSERTs: one notice per statement, all delivered at the
        // commit. The loop runs before the commit, so on PGlite, which runs statements in this
        // process, its own run time is not counted as the instance's.
        let committing = 0;
        await t.db.transaction(async (tx) => {
          await tx.query(
            `DO $$ BEGIN FOR i IN 1..${STATEMENTS} LOOP
             INSERT INTO api_keys (plan, key_hash) VALUES ('free', sha256(('one by one ' || i)::bytea));
           END LOOP; END $$`,
          );
          committing = cpuMs();
        });
        // Right at the commit, behind its notices: a revocation, and a new key. Both count from the commit.
        const [revoked] = await t.db.query<{ id: number }>('SELECT id FROM api_keys WHERE key_hash = $1', [hashKey(keys[1]!)]);
        await t.app.keyRules.revoke(revoked!.id);
        const fresh = await t.app.apiKeysRepository.create({ plan: 'pro' });
        // Every notice sent so far applied (catchUp answers false when that took longer than it waits: ask again).
        while (!(await t.app.keyNotices.catchUp()));
        const appliedMs = cpuMs() - committing;
        expect((await get(keys[1]!)).statusCode).toBe(401);
        expect((await get(fresh.key)).statusCode).toBe(200);
        expect((await get(keys[2]!)).statusCode).toBe(200);
        // One more answer after the notices, so the last gap is measured.
        const probes = answered.length;
        while (answered.length === probes) await sleep(10);
        probing = false;
        await probe;
        // The longest the instance went without answering /healthz, from the commit on.
        const since = [committing, ...answered.filter((at) => at > committing)];
        const gaps = since.slice(1).map((at, i) => at - since[i]!);
        const silentMs = Math.max(...gaps);
        // ...and in all, beyond what answering a probe costs.
        const stalledMs = gaps.reduce((sum, gap) => sum + Math.max(0, gap - 20), 0);

        const closing = performance.now();
        await t.close();
        closed = true;
        const closeMs = performance.now() - closing;
        console.log(
          `${STATEMENTS} one-row statements in one transaction, ${CACHED} keys cached (${DATABASE}), in CPU time: /healthz unanswered for ` +
            `${silentMs.toFixed(0)} ms at most after the commit (${stalledMs.toFixed(0)} ms in all), every notice applied ${appliedMs.toFixed(0)} ms after the commit; closed in ${closeMs.toFixed(0)} ms`,
        );
        // Bounds against a stall of seconds of work, not targets: the CPU time is what the instance
        // did, whatever else the machine runs. Closing waits on no timer, so its wall time is bounded.
        expect(silentMs).toBeLessThan(5_000);
        expect(stalledMs).toBeLessThan(5_000);
        expect(closeMs).toBeLessThan(10_000);
      } finally {
        probing = false;
        await probe?.catch(() => {});
        if (!closed) await t.close();
      }
    },
  );
});
