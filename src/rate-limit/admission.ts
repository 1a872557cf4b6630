import { randomBytes } from 'node:crypto';
import type { Ledger } from '../credits/ports.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { errors, secondsUntil } from '../platform/errors.js';
import { annotateRequestSpan } from '../platform/observability/tracing.js';
import type { Limits } from '../plans/limits.js';
import type { PlanBook } from '../plans/ports.js';
import type { ApiKeyIdentity, CustomerLimits } from '../api-keys/identity.js';
import { clientOf } from './address.js';
import { creditClaims, creditsRefusal, creditsSpending, decideSeeded, type CreditsSpending, type CreditsWatcher } from './credits.js';
import { setHeaders, windowPhrase } from './headers.js';
import type { RateLimitMetrics, RateLimitOutcome } from './metrics.js';
import {
  lesserWindows,
  NO_SLOT,
  served,
  type Admission,
  type CreditClaim,
  type Decision,
  type RateLimitStore,
  type Shared,
  type SharedAdmission,
  type Slot,
  type WindowUsage,
} from './stores/store.js';
import { CHARGE, createSettle, SETTLED, SLOT, slotKeeper, type Charged } from './settle.js';
import { addressSubject, ANONYMOUS, customerSubject, keyPolicy, keySubject, type KeyPolicy } from './subjects.js';

/** A key's request took one of its windows (by name; `windowStart`: the fixed window it counted in) to `threshold` percent of its limit, or past it. */
export interface UsageCrossing {
  key: ApiKeyIdentity;
  window: string;
  windowStart: number;
  limit: number;
  used: number;
  threshold: number;
  resetAt: number;
}

/** What a watcher of keys' usage hears (app.rateLimit.watchUsage): the webhooks' usage events; of credits, as CreditsWatcher says. */
export interface UsageWatcher extends CreditsWatcher {
  /** Percentages of a window's limit: crossed() hears of each one a key's request takes its window to or past. */
  thresholds: number[];
  crossed(event: UsageCrossing): void;
  /** A key's refusals started a ban, ending at bannedUntil (ms since the epoch). */
  banned(event: { key: ApiKeyIdentity; bannedUntil: number }): void;
}

/** Who a request is, as admit takes it: its key (none: its address counts), when, whether it is sure to be free, its operation's cost. */
export interface Caller {
  key: ApiKeyIdentity | undefined;
  now: number;
  free: boolean;
  cost: number;
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
  admit(request: FastifyRequest, reply: FastifyReply, caller: Caller): Promise<void>;
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
  /** The plans, whose windows, concurrency and shadow mode a key takes unless it has its own. */
  plans: PlanBook;
  /** Callers without a key count per IPv6 network of this many leading bits (see clientOf). */
  ipv6Prefix: number;
}

/** The customer's side of a request of one of its keys: a slot of its concurrency limit only for an operation that takes one (costs above 0). */
const sharedOf = (key: ApiKeyIdentity, { limits, concurrency }: CustomerLimits, operationCost: number): Shared => ({
  subject: customerSubject(key.customerId!),
  limits,
  slots: operationCost > 0 ? (concurrency ?? 0) : 0,
});

/**
 * A customer's key's decision as the headers, the 429 and settle see it: each window the one of
 * the key's and the customer's with fewer units left. `keep` is handed the key's own, for the crossings.
 */
function bound({ admission, customer }: SharedAdmission, keep: (own: Decision) => void): Admission {
  if (admission.outcome === 'busy')
    return { ...admission, standing: { ...admission.standing, windows: lesserWindows(admission.standing.windows, customer.windows) } };
  keep(admission);
  return { ...admission, windows: lesserWindows(admission.windows, customer.windows) };
}

/**
 * What a check says of a key now, counting nothing: of a customer's key with limits, each window
 * the one of its own and its customer's with fewer units left (as its headers show them).
 */
export async function keyStanding(store: RateLimitStore, key: ApiKeyIdentity, limits: Limits, now: number): Promise<Decision> {
  if (!key.customerLimits) return store.check(keySubject(key), limits, now, 1);
  const claim = { cost: 1, bans: true, count: false, slot: NO_SLOT };
  const { admission, customer } = await store.decideShared(keySubject(key), limits, now, claim, sharedOf(key, key.customerLimits, 0));
  // Asking for no slot, it is never busy.
  const own = admission.outcome === 'busy' ? admission.standing : admission;
  return { ...own, windows: lesserWindows(own.windows, customer.windows) };
}

/** What admit's steps share: the store and the settings, the ledger, and whom they tell (metrics, watchers, the credits' spending). */
interface Admitting {
  store: RateLimitStore;
  settings: AdmissionSettings;
  metrics: RateLimitMetrics;
  ledger: Ledger;
  watchers: UsageWatcher[];
  credits: CreditsSpending;
  keepSlot: ReturnType<typeof slotKeeper>;
  /** A lease no other request, of any instance, holds. */
  nextLease: () => string;
}

/** What a request is decided on: its subject (its key's, else its client's), limits and cost, its customer's side, its slot, its balances. */
interface Terms {
  key: ApiKeyIdentity | undefined;
  /** The client an address counts as (see clientOf), for a request without a key. */
  client: string | undefined;
  subject: string;
  limits: Limits;
  /** The units it spends: its operation's cost for a key, 1 for an address. */
  cost: number;
  now: number;
  /** Served past its limits, its refusals counted as would-be ones (RATE_LIMIT_SHADOW_PLANS, or a key that enforces none). */
  shadow: boolean;
  shared: Shared | undefined;
  /** The key's own concurrency limit; undefined for none. */
  limit: number | undefined;
  slot: Slot | undefined;
  credits: CreditClaim[] | undefined;
}

/** A request as the store decided it: counted or only checked, and of a customer's key its own windows (for the crossings). */
interface Decided {
  decision: Admission;
  counted: boolean;
  own: Decision | undefined;
}

/** Admits and settles the requests of the context whose pipeline calls them, deciding them in `store`. */
export function createAdmission(
  app: FastifyInstance,
  store: RateLimitStore,
  metrics: RateLimitMetrics,
  settings: AdmissionSettings,
  ledger: Ledger,
): RequestAdmission {
  app.decorateRequest(CHARGE, undefined);
  app.decorateRequest(SLOT, undefined);
  /** Leases name their instance, so that no two instances' leases on one Redis are the same. */
  const leasePrefix = randomBytes(6).toString('hex');
  let leases = 0;
  const watchers: UsageWatcher[] = [];
  const credits = creditsSpending(app, ledger, watchers);
  const keepSlot = slotKeeper(app, store);
  const admitting: Admitting = {
    store,
    settings,
    metrics,
    ledger,
    watchers,
    credits,
    keepSlot,
    nextLease: () => `${leasePrefix}:${++leases}`,
  };

  return {
    watchUsage: (watcher) => void watchers.push(watcher),

    async admit(request, reply, caller) {
      const { key, free } = caller;
      const policy = key && keyPolicy(settings.plans, key);
      if (policy && !policy.shadow && !free) refuseDearerThanWindows(admitting, request, policy.limits, caller.cost);
      const terms = termsOf(admitting, request, caller, policy);
      answer(admitting, request, reply, terms, await decide(admitting, terms, free));
    },

    settle: createSettle(app, store, credits, ledger, (request, key, now) =>
      key
        ? keyStanding(store, key, keyPolicy(settings.plans, key).limits, now)
        : store.check(addressSubject(clientOf(request.ip, settings.ipv6Prefix)), ANONYMOUS, now, 1),
    ),
  };
}

/** Counts the decision, and names it on the request's span. */
function noteOutcome({ metrics }: Admitting, request: FastifyRequest, outcome: RateLimitOutcome) {
  metrics.decisions.inc({ outcome });
  annotateRequestSpan(request, { rateLimitOutcome: outcome });
}

/** The 429 of an operation dearer than a window of the key (limits stored before RATE_LIMIT_COSTS rose): no wait would let it through. */
function refuseDearerThanWindows(admitting: Admitting, request: FastifyRequest, limits: Limits, operationCost: number) {
  const window = limits.find(({ limit }) => limit < operationCost);
  if (!window) return;
  noteOutcome(admitting, request, 'cost_exceeds_limit');
  throw errors.costExceedsLimit(operationCost, window.limit, windowPhrase(window));
}

/** The claim: what the request is decided on. */
function termsOf(
  { settings, nextLease }: Admitting,
  request: FastifyRequest,
  { key, now, cost: operationCost }: Caller,
  policy: KeyPolicy | undefined,
): Terms {
  const client = key ? undefined : clientOf(request.ip, settings.ipv6Prefix);
  const cost = key ? operationCost : 1;
  // A customer's limits bind its keys together: decided with the key's, in the same store call.
  const shared = key?.customerLimits ? sharedOf(key, key.customerLimits, operationCost) : undefined;
  const limit = key && operationCost > 0 ? policy!.concurrency : undefined;
  // With a concurrency limit, the slot and the windows are decided together: one round trip to Redis.
  const slot = limit === undefined && !shared?.slots ? undefined : { limit: limit ?? 0, lease: nextLease() };
  const subject = client === undefined ? keySubject(key!) : addressSubject(client);
  // Its balances of credits, decided with the windows in the same store call (none for an operation that costs nothing).
  const credits = key && cost > 0 ? creditClaims(key) : undefined;
  return {
    key,
    client,
    subject,
    limits: policy?.limits ?? ANONYMOUS,
    cost,
    now,
    shadow: policy?.shadow ?? false,
    shared,
    limit,
    slot,
    credits,
  };
}

/**
 * The decision, in the store, seeding the balances it has none of from the record: a free request
 * (or one that costs nothing) only checked, and counted after all when refused, to count the refusal.
 */
async function decide({ store, ledger }: Admitting, terms: Terms, free: boolean): Promise<Decided> {
  const { subject, limits, now, cost, shadow, shared, slot } = terms;
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
  const decideCounting = (count: boolean) => decideSeeded((credits) => decideClaiming(count, credits), terms.credits, ledger);
  const checked = free || cost === 0 ? await decideCounting(false) : undefined;
  const decision = checked?.outcome === 'allowed' || checked?.outcome === 'busy' ? checked : await decideCounting(true);
  return { decision, counted: decision !== checked, own };
}

/** The answer: the credits spent, the slot kept, the headers, the outcome counted, then the charge left for settle or the 429. */
function answer(admitting: Admitting, request: FastifyRequest, reply: FastifyReply, terms: Terms, { decision, counted, own }: Decided) {
  if (decision.outcome === 'busy') return refuseBusy(admitting, request, reply, terms, decision);
  // Refused for credits: nothing was counted, no window, no refusal, no slot.
  if (decision.outcome === 'credits_exhausted' || decision.outcome === 'unseeded')
    return refuseForCredits(admitting, request, reply, terms, decision);
  const { key, subject, limits, shared, cost, now, shadow, slot } = terms;
  if (counted && decision.credits && (decision.outcome === 'allowed' || shadow))
    admitting.credits.spent(key!, terms.credits!, decision.credits, cost);
  if (slot && served(decision, counted, !shadow)) admitting.keepSlot(request, reply, slot.lease, subject, shared?.subject);
  const binding = setHeaders(reply, decision, now, cost);
  noteOutcome(admitting, request, decision.outcome);
  if (decision.outcome === 'allowed') {
    (request as Charged)[CHARGE] = { subject, limits, shared, decision, cost, now, counted, bans: !shadow, credits: terms.credits };
    if (key && admitting.watchers.length > 0 && counted) reportCrossings(admitting.watchers, key, own ?? decision, cost);
    return;
  }
  (request as Charged)[CHARGE] = SETTLED;
  if (decision.outcome === 'banned') refuseBanned(admitting, request, terms, decision);
  else refuseLimited(admitting, request, terms, decision, binding);
}

/** The 429 of a request that found every slot taken, its key's or its customer's: nothing counted. */
function refuseBusy(
  admitting: Admitting,
  request: FastifyRequest,
  reply: FastifyReply,
  { key, limit, now }: Terms,
  decision: Extract<Admission, { outcome: 'busy' }>,
): never {
  (request as Charged)[CHARGE] = SETTLED;
  setHeaders(reply, decision.standing, now);
  noteOutcome(admitting, request, 'concurrency_limited');
  if (decision.customerBusy) throw errors.concurrencyLimited(key!.customerLimits!.concurrency!, "This API key's customer");
  throw errors.concurrencyLimited(limit!);
}

/** The 429 of a request a balance of credits holds less than its cost of; the watchers told what it found of the balances. */
function refuseForCredits(
  admitting: Admitting,
  request: FastifyRequest,
  reply: FastifyReply,
  { key, cost, now }: Terms,
  decision: Decision,
): never {
  (request as Charged)[CHARGE] = SETTLED;
  setHeaders(reply, decision, now, cost);
  noteOutcome(admitting, request, 'credits_exhausted');
  admitting.credits.tell(key!, decision.credits!);
  throw creditsRefusal(key!, decision.credits!, cost, now);
}

/** The 429 of a banned caller; a ban this request started logged, and told to the watchers. */
function refuseBanned(
  { watchers }: Admitting,
  request: FastifyRequest,
  { key, client, now }: Terms,
  decision: Extract<Decision, { outcome: 'banned' }>,
): never {
  const until = new Date(decision.bannedUntil).toISOString();
  if (decision.banStarted) {
    request.log.warn({ keyId: key?.id, address: client, until }, 'rate limit ban');
    if (key) for (const watcher of watchers) watcher.banned({ key, bannedUntil: decision.bannedUntil });
  }
  throw errors.banned(until, secondsUntil(decision.bannedUntil - now));
}

/** The 429 of a request its windows refuse; in shadow mode it is served, counted as a would-be refusal. */
function refuseLimited(
  { metrics }: Admitting,
  request: FastifyRequest,
  { key, cost, now, shadow }: Terms,
  decision: Extract<Decision, { outcome: 'limited' }>,
  binding: WindowUsage,
) {
  const window = windowPhrase(binding);
  if (shadow) {
    metrics.shadowRefusals.inc({ plan: key!.plan });
    // The first of the minute, on whichever instance: the store counts them.
    if (decision.refusals === 1) request.log.warn({ keyId: key!.id, plan: key!.plan, window, cost }, 'rate limit shadow refusal');
    return;
  }
  throw errors.rateLimited(binding.limit, window, secondsUntil(binding.resetAt - now), { cost, remaining: binding.limit - binding.used });
}

/** Tells the watchers which thresholds this request's cost took either window of its key across. */
function reportCrossings(watchers: UsageWatcher[], key: ApiKeyIdentity, decision: Decision, cost: number) {
  for (const watcher of watchers) {
    for (const { name, start, limit, used, resetAt } of decision.windows) {
      for (const threshold of watcher.thresholds) {
        const mark = threshold * limit;
        if ((used - cost) * 100 < mark && mark <= used * 100)
          watcher.crossed({ key, window: name, windowStart: start, limit, used, threshold, resetAt });
      }
    }
  }
}
