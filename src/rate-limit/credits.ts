import type { FastifyInstance } from 'fastify';
import type { Ledger } from '../credits/ports.js';
import type { ApiKeyIdentity, CreditBalance } from '../api-keys/identity.js';
import { errors, secondsUntil } from '../platform/errors.js';
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

/**
 * What admission does with the balances' standings a decision left: records what was spent or
 * given back (the ledger writes it within a second), and tells the watchers of a balance that ran
 * out (a request left it none, or was refused for it), once per balance and version across all instances.
 */
export function creditsSpending(
  app: FastifyInstance,
  ledger: Ledger,
  watchers: ReadonlyArray<{ creditsExhausted?(event: CreditsExhaustedEvent): void }>,
) {
  /**
   * Tells the watchers of each balance a decision left at 0 (served or refused): exhausted is what can
   * serve nothing, not a balance a dearer request finds short while a cheaper one would still be served.
   */
  function exhausted(key: ApiKeyIdentity, standings: readonly CreditStanding[]) {
    if (!watchers.some((watcher) => watcher.creditsExhausted !== undefined)) return;
    balancesOf(key).forEach(({ owner, balance }, i) => {
      const { remaining, version } = standings[i]!;
      if (remaining === null || remaining > 0) return;
      ledger
        .exhaustedOnce(balance.id, version)
        .then((first) => {
          const event = { key, owner, balance, version, remaining: Math.max(0, remaining) };
          if (first) for (const watcher of watchers) watcher.creditsExhausted?.(event);
        })
        .catch((error: unknown) => app.log.warn({ err: error, balanceId: balance.id }, 'credits: marking a balance exhausted failed'));
    });
  }
  return {
    exhausted,
    /**
     * A counted request spent `cost` from each balance; one that leaves a balance at 0 tells it
     * exhausted. Spending the store made in the record itself (`recorded`) is there already.
     */
    spent(key: ApiKeyIdentity, claims: readonly CreditClaim[], standings: readonly CreditStanding[], cost: number) {
      claims.forEach((claim, i) => {
        const { recorded, remaining, version } = standings[i]!;
        // remaining is of the claim's base when the store holds the claim's version.
        const spentAfter = version === claim.version && remaining !== null ? claim.base - remaining : undefined;
        if (!recorded) ledger.spend(claim.subject, claim.id, version, cost, spentAfter);
      });
      exhausted(key, standings);
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
