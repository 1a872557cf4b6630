import type { FastifyInstance } from 'fastify';
import type { Ledger } from '../credits/ports.js';
import type { ApiKeyIdentity, CreditBalance } from '../api-keys/identity.js';
import { errors, secondsUntil } from '../platform/errors.js';
import { Lru } from '../platform/lib/lru.js';
import type { CreditClaim, CreditStanding, Decision } from './stores/store.js';
import { customerSubject, keySubject } from './subjects.js';

/** The channel of the notices of balances gone: removed, replaced, or their quota's keys all revoked (migrations/018). */
export const BALANCE_GONE = 'credit_balance_gone';

/** A notice of a balance gone: its id, and the subject the store keeps it under (its customer's, or its quota's key's). */
export function parseBalanceGone(payload: string) {
  const { id, customerId, quotaId, keyCustomerId } = JSON.parse(payload) as Record<string, number | null>;
  const subject = customerId ? customerSubject(customerId) : keySubject({ quotaId: quotaId!, customerId: keyCustomerId ?? null });
  return { subject, id: id! };
}

/** Whose a balance is: the key's quota's, or its customer's. */
export type CreditOwner = 'key' | 'customer';

/** A key's balances of credits, in the order the store is claimed them: its quota's, then its customer's. */
export const balancesOf = (key: ApiKeyIdentity): Array<{ owner: CreditOwner; balance: CreditBalance }> => [
  ...(key.credits ? [{ owner: 'key' as const, balance: key.credits }] : []),
  ...(key.customerCredits ? [{ owner: 'customer' as const, balance: key.customerCredits }] : []),
];

/**
 * The claims of a key's balances on the store, each kept under its owner's subject (the key's
 * quota's, its customer's), so in the Cluster slot of the key's subject; undefined without any.
 */
export function creditClaims(key: ApiKeyIdentity): CreditClaim[] | undefined {
  // Most keys have none: nothing allocated for them on the hot path.
  if (!key.credits && !key.customerCredits) return undefined;
  const claims = balancesOf(key).map(({ owner, balance }) => ({
    subject: owner === 'key' ? keySubject(key) : customerSubject(key.customerId!),
    id: balance.id,
    version: balance.version,
    base: balance.base,
  }));
  return claims;
}

/** The claims, each balance the store answered unseeded with its record as the seed. */
export const seeded = (claims: readonly CreditClaim[], standings: readonly CreditStanding[] | undefined, ledger: Ledger) =>
  Promise.all(
    claims.map(async (claim, i) =>
      standings?.[i]?.remaining === null ? { ...claim, seed: await ledger.seed(claim.id, claim.version) } : claim,
    ),
  );

/**
 * Decides with the claims and, when the store did not hold one of the balances (never seen, or
 * Redis flushed: `unseeded`, or a check's standing of none), once more with their records as
 * seeds: the store writes a seed only where it still has none, so two instances seeding at once
 * do not count the record twice.
 */
export async function decideSeeded<D extends Decision | { outcome: 'busy' }>(
  decide: (claims: readonly CreditClaim[] | undefined) => Promise<D>,
  claims: readonly CreditClaim[] | undefined,
  ledger: Ledger,
): Promise<D> {
  const unseeded = (decided: D) => (decided as Decision).credits?.some(({ remaining }) => remaining === null) ?? false;
  const decision = await decide(claims);
  if (!unseeded(decision)) return decision;
  const again = await decide(await seeded(claims!, (decision as Decision).credits, ledger));
  if (unseeded(again)) throw new Error('credits: a balance still unseeded once seeded');
  return again;
}

/** The balance with the fewest units left (the key's on a tie), as a decision left it: what a 429 and the quota endpoint show. */
export function bindingBalance(key: ApiKeyIdentity, standings: readonly CreditStanding[]) {
  const balances = balancesOf(key);
  let binding = 0;
  standings.forEach(({ remaining }, i) => {
    if ((remaining ?? 0) < (standings[binding]!.remaining ?? 0)) binding = i;
  });
  return { ...balances[binding]!, remaining: Math.max(0, standings[binding]!.remaining ?? 0) };
}

/**
 * The 429 of a request a balance holds less than its cost of: naming the binding balance, with
 * Retry-After until every balance short of the cost is refilled, absent when one of them has no refill.
 */
export function creditsRefusal(key: ApiKeyIdentity, standings: readonly CreditStanding[], cost: number, now: number) {
  const { owner, remaining } = bindingBalance(key, standings);
  const short = balancesOf(key).filter((_, i) => (standings[i]?.remaining ?? 0) < cost);
  const refills = short.map(({ balance }) => balance.refillAt);
  const retryAfter = refills.includes(null) ? undefined : secondsUntil(Math.max(...(refills as number[])) - now);
  return errors.creditsExhausted(owner === 'key' ? "This API key's" : "This API key's customer's", remaining, cost, retryAfter);
}

/** A balance of credits of a key (its own, or its customer's) that ran out in `version`: usage watchers hear of it. */
export interface CreditsExhaustedEvent {
  key: ApiKeyIdentity;
  owner: CreditOwner;
  balance: CreditBalance;
  version: number;
  remaining: number;
}

/** A balance of credits of a key whose remaining fell below `threshold` percent of its base (`balance.base`) in `version`. */
export type CreditsLowEvent = CreditsExhaustedEvent & { threshold: number };

/** What a watcher hears of the balances of credits a decision left. */
export interface CreditsWatcher {
  /**
   * A balance of credits of a key (its own, or its customer's) ran out in its version: a request
   * left it none, or was refused for it. Once per balance and version across all instances.
   */
  creditsExhausted?(event: CreditsExhaustedEvent): void;
  /** Percentages of a balance's base: creditsLow() hears of each one a decision leaves its remaining below. */
  creditsLowThresholds?: readonly number[];
  /**
   * A balance's remaining is below one of creditsLowThresholds in its version: once per balance, version and
   * threshold on this instance (as long as it remembers it), so the watcher makes it once across instances.
   * A promise it returns that rejects (the watcher failed to act on it) makes the next decision tell it again.
   */
  creditsLow?(event: CreditsLowEvent): Promise<unknown> | void;
}

/** The balances whose thresholds told low this instance remembers, the least recently told forgotten first (then told again). */
const LOW_BALANCES_REMEMBERED = 10_000;

/**
 * A balance's remaining below `threshold` percent of its base (none below a base of 0: exhausted tells of that one):
 * remaining × 100 < base × threshold, exactly, with the base split at 100, as a base up to 10^15 × 100 is past 2^53.
 */
function isBelow(remaining: number, base: number, threshold: number) {
  const hundreds = Math.floor(base / 100);
  return (remaining - hundreds * threshold) * 100 < (base % 100) * threshold;
}

/**
 * What admission does with the balances' standings a decision left: records what was spent or
 * given back (the ledger writes it within a second), and tells the watchers of a balance that ran
 * out (a request left it none, or was refused for it), once per balance and version across all
 * instances, and of each threshold a balance fell below.
 */
export function creditsSpending(app: FastifyInstance, ledger: Ledger, watchers: readonly CreditsWatcher[]) {
  /** Per balance, the version and thresholds told low in it on this instance. */
  const toldLow = new Lru<number, { version: number; thresholds: Set<number> }>(LOW_BALANCES_REMEMBERED);

  /**
   * Tells the watchers of each balance a decision left at 0 (served or refused): exhausted is what can
   * serve nothing, not a balance a dearer request finds short while a cheaper one would still be served.
   */
  function exhausted(key: ApiKeyIdentity, owner: CreditOwner, balance: CreditBalance, { remaining, version }: CreditStanding) {
    if (remaining === null || remaining > 0) return;
    ledger
      .exhaustedOnce(balance.id, version)
      .then((first) => {
        const event = { key, owner, balance, version, remaining: Math.max(0, remaining) };
        if (first) for (const watcher of watchers) watcher.creditsExhausted?.(event);
      })
      .catch((error: unknown) => app.log.warn({ err: error, balanceId: balance.id }, 'credits: marking a balance exhausted failed'));
  }

  /**
   * Tells the watchers of each of their thresholds the balance's remaining is below, once per balance,
   * version and threshold on this instance, without a round trip: the watcher makes it once across instances.
   */
  function low(key: ApiKeyIdentity, owner: CreditOwner, balance: CreditBalance, { remaining, version }: CreditStanding) {
    // Its base is known for the key's version only: a standing of another version (a set or refill this
    // instance has not read yet) is passed over, as the key is read again within a second with the new one.
    if (remaining === null || version !== balance.version) return;
    for (const watcher of watchers) {
      for (const threshold of watcher.creditsLowThresholds ?? []) {
        if (!isBelow(remaining, balance.base, threshold)) continue;
        const told = toldLowIn(balance.id, version);
        if (told.has(threshold)) continue;
        told.add(threshold);
        const event = { key, owner, balance, version, remaining: Math.max(0, remaining), threshold };
        // Every watcher of the threshold at once: marked told, it is not met again in this loop.
        for (const each of watchers) {
          if (each.creditsLowThresholds?.includes(threshold))
            void Promise.resolve(each.creditsLow?.(event)).catch(() => told.delete(threshold));
        }
      }
    }
  }

  /** The thresholds told low of the balance in this version on this instance (none yet in a version newer than it remembers). */
  function toldLowIn(id: number, version: number): Set<number> {
    const remembered = toldLow.get(id);
    if (remembered?.version === version) return remembered.thresholds;
    const thresholds = new Set<number>();
    toldLow.set(id, { version, thresholds });
    return thresholds;
  }

  /** Tells the watchers what a decision left of the key's balances: each that ran out, and each threshold one fell below. */
  function tell(key: ApiKeyIdentity, standings: readonly CreditStanding[]) {
    const exhaustion = watchers.some((watcher) => watcher.creditsExhausted !== undefined);
    const lows = watchers.some((watcher) => watcher.creditsLow !== undefined);
    if (!exhaustion && !lows) return;
    balancesOf(key).forEach(({ owner, balance }, i) => {
      if (exhaustion) exhausted(key, owner, balance, standings[i]!);
      if (lows) low(key, owner, balance, standings[i]!);
    });
  }
  return {
    tell,
    /**
     * A counted request spent `cost` from each balance; the watchers are told what it left of them
     * (tell). Spending the store made in the record itself (`recorded`) is there already.
     */
    spent(key: ApiKeyIdentity, claims: readonly CreditClaim[], standings: readonly CreditStanding[], cost: number) {
      claims.forEach((claim, i) => {
        const { recorded, remaining, version } = standings[i]!;
        // remaining is of the claim's base when the store holds the claim's version.
        const spentAfter = version === claim.version && remaining !== null ? claim.base - remaining : undefined;
        if (!recorded) ledger.spend(claim.subject, claim.id, version, cost, spentAfter);
      });
      tell(key, standings);
    },
    /**
     * A counted request taken back (a free 304) gives its cost back to each balance, in the version
     * it was spent in; the store gives back in the record itself what it spent there (`recorded`).
     */
    refunded(claims: readonly CreditClaim[], standings: readonly CreditStanding[], cost: number) {
      claims.forEach((claim, i) => {
        if (!standings[i]!.recorded) ledger.spend(claim.subject, claim.id, standings[i]!.version, -cost);
      });
    },
  };
}

export type CreditsSpending = ReturnType<typeof creditsSpending>;
