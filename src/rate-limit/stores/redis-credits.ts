import type { Cluster, Redis } from 'ioredis';
import type { LiveBalance } from '../../credits/ports.js';
import type { CreditClaim, CreditStanding } from './store.js';

/** What sets a balance's key apart from its subject's other keys (`<subject's base>:cr:<id>`): its id follows. */
export const CREDIT_KEY_INFIX = ':cr:';

/** The ARGV of a request's balances of credits, as the decision scripts take them (see CREDITS in redis-scripts.ts); the count first. */
export const creditArgs = (credits: readonly CreditClaim[] = []): Array<string | number> => [
  credits.length,
  ...credits.flatMap(({ base, version, seed }) => [base, version, seed?.spent ?? '', seed?.version ?? '']),
];

/** The balances' standings a script answered, from position `from` on: remaining (null when unseeded) and version of each. */
export function creditStandings(decided: readonly (number | null)[], from: number): CreditStanding[] {
  const standings: CreditStanding[] = [];
  for (let i = from; i + 1 < decided.length; i += 2) standings.push({ remaining: decided[i] ?? null, version: decided[i + 1]! });
  return standings;
}

/** The balances at these keys as their hashes hold them (v, s), in order (one HMGET each: on a cluster they live on many slots). */
export async function readLiveBalances(redis: Redis | Cluster, keys: readonly string[]): Promise<Array<LiveBalance | undefined>> {
  const stored = await Promise.all(keys.map((key) => redis.hmget(key, 'v', 's')));
  return stored.map(([version, spent], i) => {
    const id = Number(keys[i]!.slice(keys[i]!.lastIndexOf(CREDIT_KEY_INFIX) + CREDIT_KEY_INFIX.length));
    return version == null || spent == null || !Number.isSafeInteger(id)
      ? undefined
      : { id, version: Number(version), spent: Number(spent) };
  });
}

/** A literal for a SCAN MATCH pattern, its glob characters escaped. */
export const globEscape = (text: string) => text.replace(/[*?[\]\\]/g, '\\$&');

/** Every balance whose key starts with `start` on these nodes (each master of a cluster), a batch per SCAN reply. */
export async function* scanLiveBalances(redis: Redis | Cluster, nodes: readonly Redis[], start: string): AsyncIterable<LiveBalance[]> {
  const match = `${globEscape(start)}*${CREDIT_KEY_INFIX}*`;
  for (const node of nodes) {
    for await (const keys of node.scanStream({ match, count: 1000 }) as AsyncIterable<string[]>) {
      yield (await readLiveBalances(redis, keys)).filter((balance) => balance !== undefined);
    }
  }
}
