// The client's backoff: how long to wait after a failure, and sleeping that long.

/** The first retry after a failure without a stated wait waits up to this long; each next one up to twice as long. */
const BACKOFF_BASE_MS = 250;
/** No backoff is longer. */
const BACKOFF_CAP_MS = 8_000;
/** After a wait the service stated, the spread added to it is at most this (and at most the attempt's backoff cap). */
const STATED_SPREAD_CAP_MS = 1_000;
/** The longest timer the platforms hold: a longer delay fires at once (Node) or after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

const backoffCapMs = (attempt: number) => Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt);

/**
 * How long to wait before retrying after the failure of attempt `attempt` (0 for the first).
 * Without a stated wait: capped exponential backoff with full jitter (a random wait between 0 and
 * the attempt's cap), so that clients that failed together do not retry together. After a stated
 * wait (`Retry-After`): that wait, never less, plus a random spread of at most 1 s, so that callers
 * told the same time do not all come back at once, and a wait the caller allowed (`maxWaitMs`
 * bounds the stated wait) is not made too long by the spread.
 */
export function retryDelayMs(attempt: number, statedMs: number | undefined): number {
  if (statedMs === undefined) return Math.random() * backoffCapMs(attempt);
  return statedMs + Math.random() * Math.min(STATED_SPREAD_CAP_MS, backoffCapMs(attempt));
}

/** Resolves after `ms` (slept in pieces a timer can hold), or rejects with the signal's reason the moment it aborts. */
export async function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  let left = ms;
  do {
    const piece = Math.min(left, MAX_TIMER_MS);
    await sleepOnce(piece, signal);
    left -= piece;
  } while (left > 0);
}

function sleepOnce(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
