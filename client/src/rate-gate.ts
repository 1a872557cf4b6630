import { RateLimitError, type PetStoreError } from './errors.js';
import { clockOffsetMs, rateLimitOf, retryAfterMs, type RateLimit } from './headers.js';
import { sleep } from './backoff.js';

/** What a 429 of the windows or a ban without Retry-After is taken to ask for (the service always sends one). */
const DEFAULT_RETRY_AFTER_MS = 1_000;
/** While the key is out of quota for longer than a caller waits, one request this often sees whether the limit was lifted. */
const PROBE_INTERVAL_MS = 60_000;

/** The key's quota in one window, as this client knows it. */
interface Budget {
  /** The window's X-RateLimit-Reset (Unix seconds): a later one is a later window. */
  reset: number;
  /** When the window resets, by this machine's clock (see clockOffsetMs). */
  resetsAt: number;
  /** Requests this client may still send in the window. */
  remaining: number;
}

/**
 * Every request of one client passes here before it is sent, so that the key is never refused
 * twice in a row and never banned (the service bans a key that keeps sending after 429s):
 * - after a 429, nothing is sent until its Retry-After has passed (not after `credits_exhausted`:
 *   see settle);
 * - once the window's requests are spent (X-RateLimit-Remaining reaches 0, counting the requests
 *   this client has sent since), nothing is sent until X-RateLimit-Reset;
 * - while no answer of the window has said what is left, one request at a time goes out, so a
 *   burst of concurrent calls cannot overrun a quota it has not heard of yet.
 * A wait longer than the call's maxWaitMs fails at once (429 `rate_limited`) and sends nothing,
 * except for one probe a minute: a limit lifted meanwhile (a plan changed, a ban lifted) is seen by
 * its answer, and one request a minute is far from what gets a key banned.
 */
export class RateGate {
  #blockedUntil = 0;
  #budget: Budget | undefined;
  #learning = true;
  #inFlight = 0;
  /** The fewest Remaining the answers stated since nothing was in flight: the window's count once all are back. */
  #lowest = Infinity;
  #waitingForAnswer: Array<() => void> = [];
  /** When the last request was let through (the last probe's included). */
  #lastSentAt = -Infinity;
  #probing = false;
  /** The rate limit the last answer stated. */
  last: RateLimit | undefined;

  /**
   * Waits until a request may be sent and counts it as sent; every acquire is followed by one
   * settle, told whether this request was the probe.
   */
  async acquire(signal: AbortSignal | undefined, maxWaitMs: number): Promise<{ probe: boolean }> {
    let probe = false;
    for (;;) {
      signal?.throwIfAborted();
      const now = Date.now();
      if (this.#budget && now >= this.#budget.resetsAt) {
        this.#budget = undefined;
        this.#learning = true;
      }
      const spentUntil = this.#budget && this.#budget.remaining <= 0 ? this.#budget.resetsAt : 0;
      const until = Math.max(this.#blockedUntil, spentUntil);
      if (until > now) {
        if (until - now <= maxWaitMs) {
          await sleep(until - now, signal);
          continue;
        }
        if (this.#probing || now - this.#lastSentAt < PROBE_INTERVAL_MS) throw outOfQuota(until - now, maxWaitMs);
        probe = this.#probing = true;
        break;
      }
      if (this.#budget) {
        this.#budget.remaining--;
        break;
      }
      if (this.#learning && this.#inFlight > 0) {
        await this.#nextAnswer(signal);
        continue;
      }
      break;
    }
    this.#inFlight++;
    this.#lastSentAt = Date.now();
    return { probe };
  }

  /**
   * Learns from the answer to a request acquire let through (undefined when none came), and the
   * code of its error body when it failed.
   */
  settle(response: Response | undefined, receivedAt: number, { probe }: { probe: boolean }, code?: PetStoreError['code']): void {
    this.#inFlight--;
    if (probe) this.#probing = false;
    if (response) {
      this.#learning = false;
      const offset = clockOffsetMs(response.headers, receivedAt);
      const stated = rateLimitOf(response.headers);
      if (stated) this.#learn(stated, offset);
      if (response.status === 429) {
        // Credits spent say nothing of the windows and count towards no ban; a top-up may come any
        // moment and a cheaper operation may still pass: the refused call alone waits (client.ts).
        // A probe refused so has learnt nothing of a ban or a spent window either: the gate stays shut.
        if (code !== 'credits_exhausted') {
          const wait = retryAfterMs(response.headers, offset, receivedAt) ?? DEFAULT_RETRY_AFTER_MS;
          this.#blockedUntil = Math.max(this.#blockedUntil, receivedAt + wait);
        }
      } else if (probe) {
        // Answered: the limit was lifted. What its headers state of the window now counts.
        this.#blockedUntil = 0;
      }
    }
    for (const wake of this.#waitingForAnswer.splice(0)) wake();
  }

  #learn(stated: RateLimit, offsetMs: number): void {
    this.last = stated;
    const reset = stated.reset.getTime() / 1000;
    if (!this.#budget || reset > this.#budget.reset) {
      this.#budget = { reset, resetsAt: stated.reset.getTime() - offsetMs, remaining: Infinity };
      this.#lowest = Infinity;
    }
    // An answer from an earlier window, overtaken by one of a later window, says nothing of now.
    if (reset !== this.#budget.reset) return;
    this.#lowest = Math.min(this.#lowest, stated.remaining);
    // Requests still in flight may or may not be counted in what this answer says is left.
    this.#budget.remaining = this.#inFlight === 0 ? this.#lowest : Math.min(this.#budget.remaining, stated.remaining - this.#inFlight);
    if (this.#inFlight === 0) this.#lowest = Infinity;
  }

  #nextAnswer(signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal!.reason as Error);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waitingForAnswer.push(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }
}

function outOfQuota(waitMs: number, maxWaitMs: number): RateLimitError {
  const seconds = Math.ceil(waitMs / 1000);
  return new RateLimitError({
    status: 429,
    code: 'rate_limited',
    message: `The API key's rate limit allows the next request in ${seconds} s, longer than maxWaitMs (${maxWaitMs} ms); nothing was sent`,
    retryAfter: seconds,
  });
}
