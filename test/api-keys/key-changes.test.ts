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

  it('keeps the instance answering, keys created or revoked right after take effect, and it closes promptly', async () => {
    const t = await buildTestApp();
    let probing = true;
    let probe: Promise<void> | undefined;
    let closed = false;
    try {
      // Keys in use, each seen once (from an address of its own: unseen keys are limited per address).
      const keys = Array.from({ length: CACHED }, generateKey);
      await t.db.query("INSERT INTO api_keys (plan, key_hash) SELECT 'pro', h FROM unnest($1::bytea[]) AS h", [keys.map(hashKey)]);
      const get = (key: string, n = 0) =>
        t.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key), remoteAddress: `10.0.${n >> 8}.${n & 255}` });
      await eventually(async () => (await get(keys[0]!)).statusCode === 200);
      for (let i = 0; i < CACHED; i += 50) {
        const statuses = await Promise.all(keys.slice(i, i + 50).map((key, j) => get(key, i + j)));
        expect(statuses.filter((response) => response.statusCode !== 200).map((response) => response.body)).toEqual([]);
      }

      const answered: number[] = [];
      probe = (async () => {
        while (probing) {
          expect((await t.app.inject('/healthz')).statusCode).toBe(200);
          answered.push(performance.now());
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
        committing = performance.now();
      });
      // Right at the commit, behind its notices: a revocation, and a new key. Both count from the commit.
      const [revoked] = await t.db.query<{ id: number }>('SELECT id FROM api_keys WHERE key_hash = $1', [hashKey(keys[1]!)]);
      await t.app.keyRules.revoke(revoked!.id);
      const fresh = await t.app.apiKeysRepository.create({ plan: 'pro' });
      const sinceCommit = async (condition: () => Promise<boolean>) => {
        await eventually(condition, 5_000);
        return performance.now() - committing;
      };
      const [revokedMs, createdMs] = await Promise.all([
        sinceCommit(async () => (await get(keys[1]!)).statusCode === 401),
        sinceCommit(async () => (await get(fresh.key)).statusCode === 200),
      ]);
      expect((await get(keys[2]!)).statusCode).toBe(200);
      await sleep(100);
      probing = false;
      await probe;
      // The longest the instance went without answering /healthz, from the commit on.
      const since = [committing, ...answered.filter((at) => at > committing)];
      const gaps = since.slice(1).map((at, i) => at - since[i]!);
      const silentMs = Math.max(...gaps);
      // ...and in all, beyond the probe's own pauses.
      const stalledMs = gaps.reduce((sum, gap) => sum + Math.max(0, gap - 20), 0);

      const closing = performance.now();
      await t.close();
      closed = true;
      const closeMs = performance.now() - closing;
      console.log(
        `${STATEMENTS} one-row statements in one transaction, ${CACHED} keys cached (${DATABASE}): /healthz unanswered for ` +
          `${silentMs.toFixed(0)} ms at most after the commit (${stalledMs.toFixed(0)} ms in all), new key working ${createdMs.toFixed(0)} ms and revocation ${revokedMs.toFixed(0)} ms after the commit, closed in ${closeMs.toFixed(0)} ms`,
      );
      // Bounds against a stall of seconds, not targets: the figures logged above are tens of
      // milliseconds on a quiet machine, and a shared one can add a second to any of them.
      expect(silentMs).toBeLessThan(5_000);
      expect(stalledMs).toBeLessThan(5_000);
      expect(closeMs).toBeLessThan(10_000);
    } finally {
      probing = false;
      await probe?.catch(() => {});
      if (!closed) await t.close();
    }
  });
});
