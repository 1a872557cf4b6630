export interface GroupCommitOptions<I, R> {
  /** Sends items together; resolves to one result per item, in their order. */
  send: (items: I[]) => Promise<R[]>;
  /** Items in one send at most, and sends under way at once at most. */
  maxBatch: number;
  maxInFlight: number;
  /** How long an item may wait to be sent; past it, its caller gets `timedOut()`. */
  maxWaitMs: number;
  timedOut: () => Error;
  /** Errors that sending each item alone would only repeat, so the whole batch gets them. */
  final?: (error: unknown) => boolean;
}

interface Waiting<I, R> {
  item: I;
  resolve: (result: R) => void;
  reject: (error: unknown) => void;
  timer: NodeJS.Timeout;
}

/**
 * Group commit: items that arrive while sends are under way wait for one to finish, then go
 * together in one send. Alone, an item goes at once; under load, many share a round trip. Each
 * caller gets its own result only once its send is done, and an item that fails its batch is
 * sent again on its own, so it never fails the others.
 */
export function groupCommit<I, R>({ send, maxBatch, maxInFlight, maxWaitMs, timedOut, final = () => false }: GroupCommitOptions<I, R>) {
  const waiting: Array<Waiting<I, R>> = [];
  let inFlight = 0;

  async function sendBatch(): Promise<void> {
    if (inFlight >= maxInFlight || waiting.length === 0) return;
    const batch = waiting.splice(0, maxBatch);
    for (const { timer } of batch) clearTimeout(timer);
    inFlight++;
    try {
      const results = await send(batch.map(({ item }) => item));
      batch.forEach(({ resolve }, position) => resolve(results[position]!));
    } catch (error) {
      if (batch.length === 1 || final(error)) batch.forEach(({ reject }) => reject(error));
      else await Promise.all(batch.map(({ item, resolve, reject }) => send([item]).then(([result]) => resolve(result!), reject)));
    } finally {
      inFlight--;
      void sendBatch();
    }
  }

  return function submit(item: I): Promise<R> {
    return new Promise((resolve, reject) => {
      const entry: Waiting<I, R> = {
        item,
        resolve,
        reject,
        timer: setTimeout(() => {
          waiting.splice(waiting.indexOf(entry), 1);
          reject(timedOut());
        }, maxWaitMs),
      };
      waiting.push(entry);
      void sendBatch();
    });
  };
}
