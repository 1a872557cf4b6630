import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { expect } from 'vitest';
import { eventually } from '../support/eventually.js';
import { describeNeeding, NEEDS, startSentinel, type SentinelSetup } from '../support/engines/index.js';
import { bearer } from '../support/keys.js';
import { fallbackGauge, freeKeyRun, twoInstancesOn } from '../support/scale.js';
import { MINUTE } from '../support/time.js';

// The limiter on a real Sentinel-managed Redis (REDIS_SENTINELS, REDIS_SENTINEL_MASTER, issue #20),
// with AUTH: a master, its replica and three Sentinels on loopback. Two instances share the
// counters, so they share a PostgreSQL database: this runs in the PostgreSQL suite.

const PASSWORD = `pw-${randomUUID()}`;
const PREFIX = `test:${randomUUID()}:`;

const test = twoInstancesOn(
  () => startSentinel({ replicas: 1, downAfterMs: 1_000, failoverTimeoutMs: 5_000, password: PASSWORD }),
  (sentinel) => ({
    REDIS_SENTINELS: sentinel.sentinels,
    REDIS_SENTINEL_MASTER: sentinel.masterName,
    REDIS_PASSWORD: PASSWORD,
    REDIS_KEY_PREFIX: PREFIX,
  }),
);

/** Rate-limit keys the master the Sentinels name now holds. */
async function keysOnMaster(sentinel: SentinelSetup) {
  const master = await sentinel.master();
  const redis = new Redis({ host: master.host, port: master.port, password: PASSWORD, lazyConnect: true });
  await redis.connect();
  try {
    return (await redis.keys(`${PREFIX}*`)).length;
  } finally {
    redis.disconnect();
  }
}

describeNeeding(NEEDS.postgresUrl, NEEDS.redisServer)('a Sentinel-managed Redis (REDIS_SENTINELS, REDIS_SENTINEL_MASTER)', () => {
  test('counts on the master the Sentinels name, exactly across instances', async ({ engine, instances, clock }) => {
    clock.advance(MINUTE);
    const [a, b] = instances;
    const { key } = await a.app.apiKeysRepository.create({ plan: 'free', name: 'sentinel' });
    expect(await freeKeyRun([a, b], key)).toEqual({ 200: 60, 429: 10 });
    expect(await keysOnMaster(engine)).toBeGreaterThan(0);
  });

  test(
    'after the master dies: no 5xx, back in Redis on the promoted master within 5 s of +switch-master, never READONLY after the old master returns, exact again',
    { timeout: 120_000 },
    async ({ engine, instances, clock, load }) => {
      clock.advance(MINUTE);
      const [a, b] = instances;
      const running = load.start(a.auth);
      await eventually(async () => running.answered() >= 20);
      const killed = await engine.killMaster();
      const switched = await engine.waitForSwitch(30_000);
      // Decisions are back in Redis when the promoted master holds this minute's counts of a new key.
      const { key } = await a.app.apiKeysRepository.create({ plan: 'pro', name: 'after switch' });
      await eventually(async () => {
        await a.app.inject({ url: '/v1/pets?limit=1', headers: bearer(key) });
        return (await fallbackGauge(a)) === 0 && (await keysOnMaster(engine)) > 0;
      }, 10_000);
      const backMs = Date.now() - switched.at;
      console.log(`sentinel: switch ${switched.afterKillMs} ms after the kill; decisions in Redis again ${backMs} ms after the switch`);
      expect(backMs).toBeLessThan(5_000);

      await engine.restart(killed.port);
      // A Sentinel converts it once it has answered as a master for 8 s; one whose timer stalled on
      // a loaded machine is in TILT for 30 s first, and converts nothing meanwhile. Either way the
      // limiter must count on whichever master the Sentinels name.
      await engine.waitUntilRejoined(killed.port, 60_000);
      const answeredByRejoin = running.answered();
      await eventually(async () => running.answered() >= answeredByRejoin + 20);
      const { statuses } = await running.stop();
      expect(statuses.filter((status) => status >= 500)).toEqual([]);
      expect([...a.logs.lines, ...b.logs.lines].filter((line) => line.includes('READONLY'))).toEqual([]);
      expect([await fallbackGauge(a), await fallbackGauge(b)]).toEqual([0, 0]);

      clock.advance(MINUTE);
      const { key: free } = await a.app.apiKeysRepository.create({ plan: 'free', name: 'sentinel after' });
      expect(await freeKeyRun([a, b], free)).toEqual({ 200: 60, 429: 10 });
    },
  );
});
