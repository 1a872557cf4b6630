/** The first retry after a failed connection or a timeout waits up to this long; each next one up to twice as long. */
const BACKOFF_BASE_MS = 250;
/** No backoff is longer. */
const BACKOFF_CAP_MS = 8_000;

/**
 * Capped exponential backoff with full jitter (a random wait between 0 and the cap of this
 * attempt), so that clients that failed together do not retry together.
 */
export const backoffMs = (attempt: number) => Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt);

/** Resolves after `ms`, or rejects with the signal's reason the moment it aborts. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
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
