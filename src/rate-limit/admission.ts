import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { errors, secondsUntil } from '../platform/errors.js';
import { annotateRequestSpan } from '../platform/observability/tracing.js';
import type { Limits } from '../api-keys/plans.js';
import type { ApiKeyIdentity, CustomerLimits } from '../api-keys/identity.js';
import { clientOf } from './address.js';
import {
  creditClaims,
  creditsRefusal,
  creditsSpending,
  decideSeeded,
  type CreditsExhaustedEvent,
  type CreditsRecord,
  type CreditsSpending,
} from './credits.js';
import { setHeaders } from './headers.js';
import type { RateLimitMetrics, RateLimitOutcome } from './metrics.js';
import {
  lesserWindows,
  served,
  type Admission,
  type CreditClaim,
  type Decision,
  type RateLimitStore,
  type Shared,
  type SharedAdmission,
  uncounted,
} from './stores/store.js';
import { addressSubject, ANONYMOUS, customerSubject, keySubject } from './subjects.js';

/** What a watcher of keys' usage hears (app.rateLimit.watchUsage): the webhooks' usage events. */
export interface UsageWatcher {
  /** Percentages of a window's limit: crossed() hears of each one a key's request takes its window to or past. */
  thresholds: number[];
  crossed(event: { key: ApiKeyIdentity; window: 'minute' | 'day'; limit: number; used: number; threshold: number; resetAt: number }): void;
  /** A key's refusals started a ban, ending at bannedUntil (ms since the epoch). */
  banned(event: { key: ApiKeyIdentity; bannedUntil: number }): void;
  /**
   * A balance of credits of a key (its own, or its customer's) ran out in its version: a request
   * left it none, or was refused for it. Once per balance and version across all instances.
   */
  creditsExhausted?(event: CreditsExhaustedEvent): void;
}

/** The limiter's hot path: each request of the /v1 pipeline admitted, then settled. */
export interface RequestAdmission {
  /**
   * Tells the watcher of each threshold a key's counted request crosses and of each ban a key's
   * request starts, on the instance whose decision did it: with Redis, one instance each time.
   */
  watchUsage(watcher: UsageWatcher): void;
  /**
   * Decides the request of its caller (its key, else its address), sets the headers, and throws
   * its 429. A request sure to be a free revalidation, or of an operation that costs 0 (the quota
   * lookup), is only checked against the limits. A key spends its operation's `cost` (costOf) and
   * holds a slot of its concurrency limit while in flight (unless the operation costs 0); an
   * address, whose requests never reach an operation, spends 1. The slot is given back by settle,
   * or when the connection closes first (before admit too: a client gone during the key lookup).
   */
  admit(
    request: FastifyRequest,
    reply: FastifyReply,
    caller: { key: ApiKeyIdentity | undefined; now: number; free: boolean; cost: number },
  ): Promise<void>;
  /**
   * Once answered: takes back a counted request that turned out free, or counts an uncounted one
   * that did not, and gives back the request's slot of its key's concurrency limit. The response
   * waits for both, so the caller's next request, on any instance, sees them.
   * A request answered before it was decided (load shedding, shutdown, a key lookup that failed)
   * counts nothing and gets the headers of its caller as they stand: of its key, else of its address.
   */
  settle(
    request: FastifyRequest,
    reply: FastifyReply,
    caller: { key: ApiKeyIdentity | undefined; free: boolean },
  ): Promise<unknown> | undefined;
}

/** What admission takes of the limiter's settings. */
export interface AdmissionSettings {
  /** The plans whose keys are served past their limits (RATE_LIMIT_SHADOW_PLANS). */
  shadowPlans: ReadonlySet<string>;
  /** Requests a key may have in flight, by plan (RATE_LIMIT_CONCURRENCY). */
  concurrency: Record<string, number>;
  /** Callers without a key count per IPv6 network of this many leading bits (see clientOf). */
  ipv6Prefix: number;
}

interface Charge {
  subject: string;
  limits: Limits;
  /** The customer's side of a customer's key with limits, decided with the key's (no slots: settle takes none). */
  shared: Shared | undefined;
  decision: Decision;
  /** The units the request spends in both windows. */
  cost: number;
  now: number;
  /** False for a request admitted uncounted, as a sure free revalidation. */
  counted: boolean;
  /** Whether its refusals count towards a ban: false in shadow mode. */
  bans: boolean;
  /** The balances of credits it was decided against, as claimed of the store. */
  credits: readonly CreditClaim[] | undefined;
}

/** A request decided and with nothing left to settle: refused, or settled already. */
const SETTLED = 0;

/**
 * Where a request's charge waits for settle(), unset while the limiter has not decided it: a
 * request decoration that only this module can name. Set on every request, it is cheaper than a
 * WeakMap entry.
 */
const CHARGE = Symbol('rateLimitCharge');
/** Where a request that holds a slot of its key's concurrency limit keeps the way to give it back: as CHARGE, this module's alone. */
const SLOT = Symbol('rateLimitSlot');
type Charged = FastifyRequest & { [CHARGE]?: Charge | typeof SETTLED; [SLOT]?: () => Promise<unknown> };

/** The claim's slot of a request that takes none of the key's: a customer's key whose customer's slots alone are limited, or none at all. */
const NO_SLOT = { limit: 0, lease: '' };

/** The customer's side of a request of one of its keys: a slot of its concurrency limit only for an operation that takes one (costs above 0). */
const sharedOf = (key: ApiKeyIdentity, limits: CustomerLimits, operationCost: number): Shared => ({
  subject: customerSubject(key.customerId!),
  limits,
  slots: operationCost > 0 ? (limits.concurrency ?? 0) : 0,
});

/**
 * A customer's key's decision as the headers, the 429 and settle see it: each window the one of
 * the key's and the customer's with fewer units left. `keep` is handed the key's own, for the crossings.
 */
function bound({ admission, customer }: SharedAdmission, keep: (own: Decision) => void): Admission {
  if (admission.outcome === 'busy')
    return { ...admission, standing: { ...admission.standing, ...lesserWindows(admission.standing, customer) } };
  keep(admission);
  return { ...admission, ...lesserWindows(admission, customer) };
}

/**
 * What a check says of a key now, counting nothing: of a customer's key with limits, each window
 * the one of its own and its customer's with fewer units left (as its headers show them).
 */
export async function keyStanding(store: RateLimitStore, key: ApiKeyIdentity, now: number): Promise<Decision> {
  if (!key.customerLimits) return store.check(keySubject(key), key, now, 1);
  const claim = { cost: 1, bans: true, count: false, slot: NO_SLOT };
  const { admission, customer } = await store.decideShared(keySubject(key), key, now, claim, sharedOf(key, key.customerLimits, 0));
  // Asking for no slot, it is never busy.
  const own = admission.outcome === 'busy' ? admission.standing : admission;
  return { ...own, ...lesserWindows(own, customer) };
}

/** The key's limit of requests in flight: its own, else its plan's; undefined for none. */
export const concurrencyLimit = (key: ApiKeyIdentity, concurrency: Record<string, number>): number | undefined =>
  key.concurrency ?? concurrency[key.plan];

/** Gives the slot a request holds back once its answer is about to leave (settle) or its connection closes, whichever comes first. */
const slotKeeper =
  (app: FastifyInstance, store: RateLimitStore) =>
  (request: FastifyRequest, reply: FastifyReply, lease: string, subject: string, shared: string | undefined) => {
    let released: Promise<unknown> | undefined;
    const release = () =>
      (released ??= (
        shared === undefined ? store.release(subject, lease) : Promise.all([store.release(subject, lease), store.release(shared, lease)])
      ).catch((error: unknown) => app.log.warn({ err: error }, 'rate limiting: releasing a slot failed')));
    // A connection that closed before now (while the key was looked up, or Redis answered) has
    // emitted its 'close' already: its slot is given back at once.
    if (reply.raw.destroyed) return void release();
    reply.raw.once('close', () => void release());
    (request as Charged)[SLOT] = release;
  };

/** Admits and settles the requests of the context whose pipeline calls them, deciding them in `store`. */
export function createAdmission(
  app: FastifyInstance,
  store: RateLimitStore,
  { decisions, shadowRefusals }: RateLimitMetrics,
  { shadowPlans, concurrency, ipv6Prefix }: AdmissionSettings,
  record: CreditsRecord,
): RequestAdmission {
  app.decorateRequest(CHARGE, undefined);
  app.decorateRequest(SLOT, undefined);
  /** Counts the decision, and names it on the request's span. */
  const decided = (request: FastifyRequest, outcome: RateLimitOutcome) => {
    decisions.inc({ outcome });
    annotateRequestSpan(request, { rateLimitOutcome: outcome });
  };
  /** Leases name their instance, so that no two instances' leases on one Redis are the same. */
  const leasePrefix = randomBytes(6).toString('hex');
  let leases = 0;

  const keepSlot = slotKeeper(app, store);
  const watchers: UsageWatcher[] = [];
  const credits = creditsSpending(app, record, watchers);

  return {
    watchUsage: (watcher) => void watchers.push(watcher),

    async admit(request, reply, { key, now, free, cost: operationCost }) {
      const shadow = key !== undefined && (!key.enforceLimits || shadowPlans.has(key.plan));
      // Dearer than a window of the key (limits stored before RATE_LIMIT_COSTS rose): no wait would let it through.
      if (key && !shadow && !free && operationCost > Math.min(key.perMinute, key.perDay)) {
        decided(request, 'cost_exceeds_limit');
        const [limit, window] = operationCost > key.perMinute ? [key.perMinute, 'minute' as const] : [key.perDay, 'day' as const];
        throw errors.costExceedsLimit(operationCost, limit, window);
      }
      const client = key ? undefined : clientOf(request.ip, ipv6Prefix);
      const subject = client === undefined ? keySubject(key!) : addressSubject(client);
      const limits = key ?? ANONYMOUS;
      const cost = key ? operationCost : 1;
      // A customer's limits bind its keys together: decided with the key's, in the same store call.
      const shared = key?.customerLimits ? sharedOf(key, key.customerLimits, operationCost) : undefined;
      const limit = key && operationCost > 0 ? concurrencyLimit(key, concurrency) : undefined;
      // With a concurrency limit, the slot and the windows are decided together: one round trip to Redis.
      const slot = limit === undefined && !shared?.slots ? undefined : { limit: limit ?? 0, lease: `${leasePrefix}:${++leases}` };
      // Its balances of credits, decided with the windows in the same store call (none for an operation that costs nothing).
      const claims = key && cost > 0 ? creditClaims(key) : undefined;
      let own: Decision | undefined;
      const decideClaiming = (count: boolean, credits: readonly CreditClaim[] | undefined): Promise<Admission> => {
        const claim = { cost, bans: !shadow, count, slot: slot ?? NO_SLOT, credits };
        if (shared) {
          return store
            .decideShared(subject, limits, now, claim, shared)
            .then((decided) => bound(decided, (ownDecision) => (own = ownDecision)));
        }
        if (slot) return store.admit(subject, limits, now, claim);
        return count ? store.consume(subject, limits, now, cost, !shadow, credits) : store.check(subject, limits, now, cost, credits);
      };
      const decide = (count: boolean) => decideSeeded((credits) => decideClaiming(count, credits), claims, record);
      const checked = free || cost === 0 ? await decide(false) : undefined;
      const decision = checked?.outcome === 'allowed' || checked?.outcome === 'busy' ? checked : await decide(true);
      if (decision.outcome === 'busy') {
        (request as Charged)[CHARGE] = SETTLED;
        setHeaders(reply, decision.standing, now);
        decided(request, 'concurrency_limited');
        if (decision.customerBusy) throw errors.concurrencyLimited(key!.customerLimits!.concurrency!, "This API key's customer");
        throw errors.concurrencyLimited(limit!);
      }
      // Refused for credits: nothing was counted, no window, no refusal, no slot.
      if (decision.outcome === 'credits_exhausted' || decision.outcome === 'unseeded') {
        (request as Charged)[CHARGE] = SETTLED;
        setHeaders(reply, decision, now, cost);
        decided(request, 'credits_exhausted');
        credits.exhausted(key!, decision.credits!);
        throw creditsRefusal(key!, decision.credits!, cost, now);
      }
      const counted = decision !== checked;
      if (counted && decision.credits && (decision.outcome === 'allowed' || shadow)) credits.spent(key!, claims!, decision.credits, cost);
      if (slot && served(decision, counted, !shadow)) keepSlot(request, reply, slot.lease, subject, shared?.subject);
      const binding = setHeaders(reply, decision, now, cost);
      decided(request, decision.outcome);
      switch (decision.outcome) {
        case 'allowed':
          (request as Charged)[CHARGE] = { subject, limits, shared, decision, cost, now, counted, bans: !shadow, credits: claims };
          if (key && watchers.length > 0 && counted) reportCrossings(watchers, key, own ?? decision, cost);
          return;
        case 'banned': {
          (request as Charged)[CHARGE] = SETTLED;
          const until = new Date(decision.bannedUntil).toISOString();
          if (decision.banStarted) {
            request.log.warn({ keyId: key?.id, address: client, until }, 'rate limit ban');
            if (key) for (const watcher of watchers) watcher.banned({ key, bannedUntil: decision.bannedUntil });
          }
          throw errors.banned(until, secondsUntil(decision.bannedUntil - now));
        }
        case 'limited':
          (request as Charged)[CHARGE] = SETTLED;
          if (shadow) {
            shadowRefusals.inc({ plan: key.plan });
            const window = binding === decision.day ? 'day' : 'minute';
            // The first of the minute, on whichever instance: the store counts them.
            if (decision.refusals === 1) request.log.warn({ keyId: key.id, plan: key.plan, window, cost }, 'rate limit shadow refusal');
            return;
          }
          throw errors.rateLimited(binding.limit, binding === decision.day ? 'day' : 'minute', secondsUntil(binding.resetAt - now), {
            cost,
            remaining: binding.limit - binding.used,
          });
      }
    },

    settle: createSettle(app, store, ipv6Prefix, credits, record),
  };
}

/** Tells the watchers which thresholds this request's cost took either window of its key across. */
function reportCrossings(watchers: UsageWatcher[], key: ApiKeyIdentity, decision: Decision, cost: number) {
  for (const watcher of watchers) {
    for (const window of ['minute', 'day'] as const) {
      const { limit, used, resetAt } = decision[window];
      for (const threshold of watcher.thresholds) {
        const mark = threshold * limit;
        if ((used - cost) * 100 < mark && mark <= used * 100) watcher.crossed({ key, window, limit, used, threshold, resetAt });
      }
    }
  }
}

/** settle(), over the charges admit left on the requests. */
function createSettle(
  app: FastifyInstance,
  store: RateLimitStore,
  ipv6Prefix: number,
  credits: CreditsSpending,
  record: CreditsRecord,
): RequestAdmission['settle'] {
  /** What `check` says of the caller now: honest headers for a request that was never counted. */
  async function describeUndecided(request: FastifyRequest, reply: FastifyReply, key: ApiKeyIdentity | undefined) {
    const now = app.now();
    setHeaders(
      reply,
      key ? await keyStanding(store, key, now) : await store.check(addressSubject(clientOf(request.ip, ipv6Prefix)), ANONYMOUS, now, 1),
      now,
    );
  }

  // GitHub's rule: a revalidation that finds the client's copy current (304 for a tag it sent)
  // costs nothing. The request was admitted like any other, so a caller over its limit still got its 429.
  function settleCharge(request: FastifyRequest, reply: FastifyReply, key: ApiKeyIdentity | undefined, free: boolean) {
    const charge = (request as Charged)[CHARGE];
    if (charge === undefined) {
      (request as Charged)[CHARGE] = SETTLED;
      return describeUndecided(request, reply, key);
    }
    if (charge === SETTLED || free !== charge.counted) return undefined;
    (request as Charged)[CHARGE] = SETTLED;
    if (charge.counted) {
      const { decision, cost } = charge;
      setHeaders(reply, { ...decision, minute: uncounted(decision.minute, cost), day: uncounted(decision.day, cost) }, charge.now, cost);
      // Its credits come back too, to each balance still in the version they were spent in.
      if (charge.credits && charge.decision.credits) credits.refunded(charge.credits, charge.decision.credits, charge.cost);
      if (charge.shared) return store.refundShared(charge.subject, charge.shared.subject, charge.decision, charge.cost, charge.credits);
      return store.refund(charge.subject, charge.decision, charge.cost, charge.credits);
    }
    // Admitted uncounted as a sure 304, it was refused further on (a sunset meanwhile): it counts, and spends its credits
    // (unless they ran out meanwhile: it was served already).
    const count = (claims: readonly CreditClaim[] | undefined): Promise<Admission> => {
      if (!charge.shared) return store.consume(charge.subject, charge.limits, charge.now, charge.cost, charge.bans, claims);
      const claim = { cost: charge.cost, bans: charge.bans, count: true, slot: NO_SLOT, credits: claims };
      return store
        .decideShared(charge.subject, charge.limits, charge.now, claim, { ...charge.shared, slots: 0 })
        .then((both) => both.admission);
    };
    return decideSeeded(count, charge.credits, record).then((decision) => {
      if (decision.outcome !== 'busy' && decision.credits && (decision.outcome === 'allowed' || !charge.bans))
        credits.spent(key!, charge.credits!, decision.credits, charge.cost);
    });
  }

  return (request, reply, { key, free }) => {
    const settling = settleCharge(request, reply, key, free);
    const releaseSlot = (request as Charged)[SLOT];
    if (releaseSlot === undefined) return settling;
    // Given back before the answer leaves: the caller's next request, on any instance, finds it free.
    return settling ? Promise.all([releaseSlot(), settling]) : releaseSlot();
  };
}
