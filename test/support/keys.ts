import type { FastifyInstance } from 'fastify';
import { hashKey } from '../../src/api-keys/format.js';
import type { ServerProcess } from '../../harness/processes.js';
import { eventually } from './eventually.js';
import { DAY, MINUTE, type TestClock } from './time.js';

/** A key's secret as the admin API and the keys command show it, once, on create and rotate. */
export const KEY = /^psk_[0-9A-Za-z]{49}$/;

/** The Authorization header of an API key. */
export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/**
 * The one way to wait for a new key to be usable: polls an authenticated request (`probe`, which
 * answers its HTTP status) until it stops answering 401, for at most `timeoutMs`. Resolves to
 * the milliseconds it took; throws when the deadline passes first.
 */
export const waitForKey = (probe: () => Promise<number>, timeoutMs = 10_000) => eventually(async () => (await probe()) !== 401, timeoutMs);

/** Waits until the app, through inject, accepts the Authorization header. */
export const waitForKeyOnApp = (app: FastifyInstance, headers: { authorization: string }, timeoutMs?: number) =>
  waitForKey(async () => (await app.inject({ url: '/v1/pets?limit=1', headers })).statusCode, timeoutMs);

/** Waits until a server listening at `origin` accepts the Authorization header over HTTP. */
export const waitForKeyAt = (origin: string, headers: { authorization: string }, timeoutMs?: number) =>
  waitForKey(async () => (await fetch(`${origin}/v1/pets?limit=1`, { headers })).status, timeoutMs);

/** The sum of a metric of the app over its labels. */
export const metricTotal = async (app: FastifyInstance, name: string) =>
  (await app.metricsRegistry.getSingleMetric(name)!.get()).values.reduce((sum, { value }) => sum + value, 0);

/** How many times the app has looked a key up in the database so far (api_key_lookups_total). */
export const keyLookups = (app: FastifyInstance) => metricTotal(app, 'api_key_lookups_total');

/** How many notices of changed keys the app has applied so far (api_key_change_notices_total). */
export const keyNotices = (app: FastifyInstance) => metricTotal(app, 'api_key_change_notices_total');

/**
 * Waits until the app holds a key in its cache for good: every change notice sent so far has been
 * applied (the notice of its creation, back through the database a moment after the commit, has
 * a key cached before it checked again), and then a request with its Authorization header makes
 * no lookup.
 */
export const waitUntilCached = async (app: FastifyInstance, headers: { authorization: string }) => {
  if (!(await app.keyNotices.catchUp())) throw new Error('The app did not catch up with the key change notices');
  return eventually(async () => {
    const before = await keyLookups(app);
    await app.inject({ url: '/v1/pets?limit=1', headers });
    return (await keyLookups(app)) === before;
  });
};

/**
 * Waits until the app's filter of stored keys holds a key: the change notice of its creation (or
 * the reload a bulk change asks for) has reached the app, which has read the key's hash.
 */
export const waitUntilListed = (app: FastifyInstance, key: string) =>
  eventually(async () => app.keyFilter.mayHold(hashKey(key).toString('base64')));

/**
 * A new key of the app's (`settings` as the repository takes them), known to it, with the app's
 * clock then moved to `offsetMs` into a day none of whose windows it has counted in: waiting for
 * the key spends nothing of what a test then counts (each try is a day later).
 */
export async function keyInFreshWindows(
  app: FastifyInstance,
  clock: TestClock,
  settings: Parameters<FastifyInstance['apiKeysRepository']['create']>[0],
  offsetMs = 10 * MINUTE,
) {
  const { key, record } = await app.apiKeysRepository.create(settings);
  const headers = bearer(key);
  await waitForKey(async () => {
    clock.advance(DAY);
    return (await app.inject({ url: '/v1/pets/0', headers })).statusCode;
  });
  clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + offsetMs);
  return { headers, quotaId: record.quotaId };
}

/** The development key a server prints on its first embedded start. */
export async function developmentKey(server: ServerProcess): Promise<string> {
  let key: string | undefined;
  await eventually(async () => Boolean((key = server.output().match(/^ {2}(psk_\S+)$/m)?.[1])));
  return key!;
}
