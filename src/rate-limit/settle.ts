import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Limits } from '../plans/limits.js';
import type { ApiKeyIdentity } from '../api-keys/identity.js';
import type { Ledger } from '../credits/ports.js';
import { decideSeeded, type CreditsSpending } from './credits.js';
import { setHeaders } from './headers.js';
import { NO_SLOT, uncounted, type Admission, type CreditClaim, type Decision, type RateLimitStore, type Shared } from './stores/store.js';

/** What admit left on a request it counted (or admitted uncounted, as a sure free revalidation) for settle to take back or count. */
export interface Charge {
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
export const SETTLED = 0;

/**
 * Where a request's charge waits for settle(), unset while the limiter has not decided it: a
 * request decoration that only admission and settle can name. Set on every request, it is cheaper
 * than a WeakMap entry.
 */
export const CHARGE = Symbol('rateLimitCharge');
/** Where a request that holds a slot of its key's concurrency limit keeps the way to give it back: as CHARGE, admission's and settle's alone. */
export const SLOT = Symbol('rateLimitSlot');
export type Charged = FastifyRequest & { [CHARGE]?: Charge | typeof SETTLED; [SLOT]?: () => Promise<unknown> };

/** Gives the slot a request holds back once its answer is about to leave (settle) or its connection closes, whichever comes first. */
export const slotKeeper =
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

/**
 * settle() (see RequestAdmission), over the charges admit left on the requests; `standingOf` says
 * what a check says of the caller now (its key, else its address), counting nothing.
 */
export function createSettle(
  app: FastifyInstance,
  store: RateLimitStore,
  credits: CreditsSpending,
  ledger: Ledger,
  standingOf: (request: FastifyRequest, key: ApiKeyIdentity | undefined, now: number) => Promise<Decision>,
) {
  /** Honest headers for a request that was never counted. */
  async function describeUndecided(request: FastifyRequest, reply: FastifyReply, key: ApiKeyIdentity | undefined) {
    const now = app.now();
    setHeaders(reply, await standingOf(request, key, now), now);
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
      setHeaders(reply, { ...decision, windows: decision.windows.map((window) => uncounted(window, cost)) }, charge.now, cost);
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
    return decideSeeded(count, charge.credits, ledger).then((decision) => {
      if (decision.outcome !== 'busy' && decision.credits && (decision.outcome === 'allowed' || !charge.bans))
        credits.spent(key!, charge.credits!, decision.credits, charge.cost);
    });
  }

  return (request: FastifyRequest, reply: FastifyReply, { key, free }: { key: ApiKeyIdentity | undefined; free: boolean }) => {
    const settling = settleCharge(request, reply, key, free);
    const releaseSlot = (request as Charged)[SLOT];
    if (releaseSlot === undefined) return settling;
    // Given back before the answer leaves: the caller's next request, on any instance, finds it free.
    return settling ? Promise.all([releaseSlot(), settling]) : releaseSlot();
  };
}
