import fp from 'fastify-plugin';
import { errors, secondsUntil } from '../platform/errors.js';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import { clientOf } from './address.js';
import { adminOperations, type AdminOperations } from './admin/admin-operations.js';
import { createAdmission, keyStanding, type RequestAdmission } from './admission.js';
import { BALANCE_GONE, bindingBalance, creditClaims, decideSeeded, parseBalanceGone } from './credits.js';
import { FREE_CALLS, FREE_CALLS_PER_MINUTE, type FreeCall } from './free-calls.js';
import { createLookupBudget, type LookupSpent } from './lookup-budget.js';
import { rateLimitMetrics } from './metrics.js';
import { checkCostsFitPlans } from './settings.js';
import { bindingWindow } from './headers.js';
import { chooseStore, type StoreOptions } from './stores/store-choice.js';
import type { CreditClaim, WindowUsage } from './stores/store.js';
import { addressSubject, ANONYMOUS, customerSubject, keyPolicy, keySubject, freeCallSubject, type KeyQuota } from './subjects.js';

export interface RateLimitOptions extends StoreOptions {
  /** Callers without a key count per IPv6 network of this many leading bits (see clientOf). */
  ipv6Prefix: number;
  /** What an operation (by operationId) costs a key, where it is not 1 (RATE_LIMIT_COSTS). */
  costs: Record<string, number>;
}

/** A key's standing, as GET /v1/rate_limit tells it. */
export interface Standing {
  /** Each of its windows, shortest first (of a customer's key, its customer's too: see keyStanding). */
  windows: WindowUsage[];
  /** `limit` null: the key has no concurrency limit. */
  concurrency: { limit: number | null; inFlight: number };
  /** Of its balances of credits (its own, its customer's), the one with fewer units left; null without any. */
  credits: { remaining: number; refillAt: number | null } | null;
}

declare module 'fastify' {
  interface FastifyInstance {
    rateLimit: RateLimiter;
  }
}

/** The limiter: its hot path (RequestAdmission), what the API and auth ask of it, and the admin's operations. */
export interface RateLimiter extends RequestAdmission, AdminOperations {
  /** The units an operation costs a key: what RATE_LIMIT_COSTS says, else 1. */
  costOf(operationId: string | undefined): number;
  /** The operations RATE_LIMIT_COSTS prices (the API's routes refuse to start with one they do not serve). */
  pricedOperations(): string[];
  /**
   * Spends one of the lookups in the database the client an address counts as may make of keys this instance does not
   * know (LOOKUPS, this instance's count); none while the client is banned, whose request is then refused as banned.
   */
  spendLookup(address: string, now: number): Promise<LookupSpent>;
  /**
   * Spends one of the key's calls of a free operation (free-calls.ts: the quota lookup, the usage
   * read), each operation's limit its own (FREE_CALLS per key quota): 429 rate_limited past it, and no ban.
   */
  spendFreeCall(key: KeyQuota, call: FreeCall, now: number): Promise<void>;
  /**
   * The key's windows (each the lesser of its own and its customer's: keyStanding) and its
   * requests in flight now, counting nothing of them (GET /v1/rate_limit, which spends a free call first).
   */
  standing(key: ApiKeyIdentity, now: number): Promise<Standing>;
  /**
   * What the store has spent of a balance in its version (`holder`: the customer, or the key's
   * quota, whose subject keeps it), counting nothing; undefined when the store holds none of it, has
   * moved on to another version or could not tell (the subject banned): then the record is all there is.
   */
  creditsSpent(holder: KeyQuota | { customerId: number }, balance: Omit<CreditClaim, 'subject'>, now: number): Promise<number | undefined>;
  /** The requests of a key's quota in flight now, on every instance that shares the store. */
  inFlight(key: KeyQuota, now: number): Promise<number>;
}

/**
 * Per-plan limits on every request of the context whose pipeline calls it, before validation, so
 * every response (400s and 401s included) carries the headers and counts; 429s do not count.
 */
export default fp<RateLimitOptions>(
  async function rateLimit(app, options) {
    checkCostsFitPlans(app.plans.all(), options.costs);
    // The record of credits (credits/): while Redis is unreachable the balances are decided in it;
    // this instance's ledger follows the store's live balances (Redis), or adds up its own spending.
    const { store, live } = await chooseStore(app, options, app.creditsLedger.records);
    const { ipv6Prefix } = options;
    const { plans } = app;
    const ledger = app.creditsLedger.open(live);
    const lookups = createLookupBudget({ ipv6Prefix, now: app.now });
    app.addHook('onClose', () => lookups.close());
    /** What remains of the key's binding balance of credits, seeding the store from the record if it has none. */
    const creditsOf = async (key: ApiKeyIdentity, now: number): Promise<Standing['credits']> => {
      const claims = creditClaims(key);
      if (!claims) return null;
      const limits = keyPolicy(plans, key).limits;
      const check = (credits: readonly CreditClaim[] | undefined) => store.check(keySubject(key), limits, now, 0, credits);
      const { credits } = await decideSeeded(check, claims, ledger);
      // None only for a key banned since its lookup was admitted: the store tells a ban before the balances.
      if (!credits) return null;
      const { balance, remaining } = bindingBalance(key, credits);
      return { remaining, refillAt: balance.refillAt };
    };
    // A balance gone is dropped from the store; should its notice be lost, the store lets it expire (CREDITS_TTL_MS).
    const stopListening = await app.db.listen(
      BALANCE_GONE,
      (payload) => {
        const { subject, id } = parseBalanceGone(payload);
        store
          .forgetBalance(subject, id)
          .catch((error: unknown) => app.log.warn({ err: error, balanceId: id }, 'credits: dropping a balance gone failed'));
      },
      () => {},
    );
    app.addHook('onClose', stopListening);
    app.decorate('rateLimit', {
      ...createAdmission(app, store, rateLimitMetrics(app.metricsRegistry, store), { plans, ipv6Prefix }, ledger),
      ...adminOperations(store, plans, ipv6Prefix),
      costOf: (operationId) => (operationId === undefined ? 1 : (options.costs[operationId] ?? 1)),
      pricedOperations: () => Object.keys(options.costs),

      async spendLookup(address, now) {
        if ((await store.check(addressSubject(clientOf(address, ipv6Prefix)), ANONYMOUS, now, 1)).outcome === 'banned')
          return { lookUp: false };
        return lookups.spend(address, now);
      },

      async spendFreeCall(key, { operationId, route }, now) {
        const spent = await store.consume(freeCallSubject(operationId, key.quotaId), FREE_CALLS, now, 1, false);
        if (spent.outcome !== 'allowed')
          throw errors.freeCallsLimited(route, FREE_CALLS_PER_MINUTE, secondsUntil(bindingWindow(spent).resetAt - now));
      },

      async standing(key, now) {
        const policy = keyPolicy(plans, key);
        const [{ windows }, inFlight, credits] = await Promise.all([
          keyStanding(store, key, policy.limits, now),
          store.inFlight(keySubject(key), now),
          creditsOf(key, now),
        ]);
        return { windows, concurrency: { limit: policy.concurrency ?? null, inFlight }, credits };
      },
      inFlight: (key, now) => store.inFlight(keySubject(key), now),

      async creditsSpent(holder, balance, now) {
        const subject = 'quotaId' in holder ? keySubject(holder) : customerSubject(holder.customerId);
        // Not seeded here: the caller holds a transaction, and the seed's read would wait for it on a one-connection database (PGlite).
        const { credits } = await store.check(subject, ANONYMOUS, now, 0, [{ ...balance, subject }]);
        const standing = credits?.[0];
        return standing?.version === balance.version && standing.remaining !== null ? balance.base - standing.remaining : undefined;
      },
    } satisfies RateLimiter);
  },
  { name: 'rate-limit', dependencies: ['database', 'metrics', 'credits', 'plans'] },
);
