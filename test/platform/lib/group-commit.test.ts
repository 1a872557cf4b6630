import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { groupCommit } from '../../../src/platform/lib/group-commit.js';

class Unavailable extends Error {}

/** A send whose batches are recorded and finish when told to. */
function sender(respond: (items: number[]) => number[] = (items) => items.map((item) => item * 10)) {
  const batches: number[][] = [];
  const pending: Array<() => void> = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const send = (items: number[]) => {
    batches.push(items);
    mostInFlight = Math.max(mostInFlight, ++inFlight);
    return new Promise<void>((resolve) => pending.push(resolve)).then(() => {
      inFlight--;
      return respond(items);
    });
  };
  /** Finishes every send under way, until none is left. */
  const drain = async () => {
    for (let round = 0; round < 100 && pending.length > 0; round++) {
      pending.splice(0).forEach((finish) => finish());
      await sleep(0);
    }
  };
  return { send, batches, drain, mostInFlight: () => mostInFlight };
}

const options = { maxBatch: 3, maxInFlight: 2, maxWaitMs: 5_000, timedOut: () => new Unavailable('timed out') };

describe('groupCommit', () => {
  it('sends an item alone at once, and groups those that arrive while sends are under way', async () => {
    const { send, batches, drain, mostInFlight } = sender();
    const submit = groupCommit({ ...options, send });
    const results = Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map(submit));
    expect(batches).toEqual([[1], [2]]);
    await drain();
    expect(await results).toEqual([10, 20, 30, 40, 50, 60, 70, 80]);
    expect(batches).toEqual([[1], [2], [3, 4, 5], [6, 7, 8]]);
    expect(mostInFlight()).toBe(2);
  });

  it('sends each item of a failed batch again alone, so only the failing one fails', async () => {
    const { send, batches, drain } = sender((items) => {
      if (items.includes(4)) throw new Error('bad row');
      return items.map((item) => item * 10);
    });
    const submit = groupCommit({ ...options, maxInFlight: 1, send });
    const results = Promise.allSettled([1, 3, 4, 5].map(submit));
    await drain();
    expect((await results).map((result) => (result.status === 'fulfilled' ? result.value : (result.reason as Error).message))).toEqual([
      10,
      30,
      'bad row',
      50,
    ]);
    expect(batches).toEqual([[1], [3, 4, 5], [3], [4], [5]]);
  });

  it('does not retry an error that a retry would only repeat', async () => {
    const { send, batches, drain } = sender(() => {
      throw new Unavailable('down');
    });
    const submit = groupCommit({ ...options, maxInFlight: 1, send, final: (error) => error instanceof Unavailable });
    const results = Promise.allSettled([1, 2, 3].map(submit));
    await drain();
    expect((await results).map((result) => result.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(batches).toEqual([[1], [2, 3]]);
  });

  it('rejects an item that could not be sent within maxWaitMs, and never sends it', async () => {
    const { send, batches, drain } = sender();
    const submit = groupCommit({ ...options, maxInFlight: 1, maxWaitMs: 50, send });
    const first = submit(1);
    await expect(submit(2)).rejects.toThrow(Unavailable);
    await drain();
    expect(await first).toBe(10);
    expect(batches).toEqual([[1]]);
  });
});
