import { DatabaseUnavailableError } from '../../platform/db/errors.js';
import { groupCommit } from '../../platform/lib/group-commit.js';
import type { BalanceRecords, LockedSpending, RecordedBalance } from '../../credits/ports.js';

/** A request's spending: `cost` from each of its balances, or from none. */
interface Spending {
  ids: readonly number[];
  cost: number;
}

/** Whether a request spent, and its balances as its decision left them. */
export interface Spent {
  spent: boolean;
  balances: RecordedBalance[];
}

/** Requests of one balance in one transaction at most: a batch's statements cost the same for 1 request as for 500. */
const MAX_BATCH = 500;
/**
 * How long a request may wait for its balance's transaction: as long as for a pool connection,
 * so that behind a frozen database, waits stay as bounded as without batching.
 */
const MAX_WAIT_MS = 5_000;

/**
 * A batch decided in order, as one transaction per request would have: each spends its cost from
 * every one of its balances if each still holds it, else from none. A balance removed meanwhile
 * (not locked: no row) limits nothing.
 */
export function spendInOrder(requests: readonly Spending[], locked: readonly RecordedBalance[]): LockedSpending<Spent[]> {
  const balances = new Map(locked.map((balance) => [balance.id, balance]));
  const spend = new Map<number, number>();
  const answer = requests.map(({ ids, cost }) => {
    const own = ids.flatMap((id) => balances.get(id) ?? []);
    const spent = own.every(({ remaining }) => remaining >= cost);
    if (!spent) return { spent, balances: own };
    const after = own.map((balance) => ({ ...balance, remaining: balance.remaining - cost }));
    for (const balance of after) {
      balances.set(balance.id, balance);
      spend.set(balance.id, (spend.get(balance.id) ?? 0) + cost);
    }
    return { spent, balances: after };
  });
  return { spend, answer };
}

/**
 * Spending in the record while Redis is unreachable, batched per balance: a request waits in
 * memory (holding no connection) while its balance's transaction is under way, then the requests
 * that arrived meanwhile are decided together in the next, in order. So a hot balance costs one
 * transaction and one connection at a time per instance, whatever its load, and never makes the
 * requests of other balances wait; the row locks keep instances exact between them.
 */
export class OutageSpending {
  readonly #record: BalanceRecords;
  /** Each balance's batches, while a request of it waits or is decided; dropped once none does. */
  readonly #batches = new Map<number, { submit: (spending: Spending) => Promise<Spent>; requests: number }>();

  constructor(record: BalanceRecords) {
    this.#record = record;
  }

  /** Spends `cost` from every one of the balances if each holds it, else from none: as it was decided in its batch. */
  async spend(ids: readonly number[], cost: number): Promise<Spent> {
    // A request's balances are its key's, then its customer's: keyed by the last, every request
    // claiming a customer's balance goes in its batches, the key's own balance with it.
    const of = ids.at(-1)!;
    const batches = this.#batches.get(of) ?? this.#open(of);
    batches.requests++;
    try {
      return await batches.submit({ ids, cost });
    } finally {
      if (--batches.requests === 0) this.#batches.delete(of);
    }
  }

  #open(of: number) {
    const batches = {
      requests: 0,
      submit: groupCommit({
        send: (requests: Spending[]) => this.#send(requests),
        maxBatch: MAX_BATCH,
        maxInFlight: 1,
        maxWaitMs: MAX_WAIT_MS,
        timedOut: () =>
          new DatabaseUnavailableError({ cause: new Error(`no transaction of the balance could begin within ${MAX_WAIT_MS} ms`) }),
        // A batch fails for the database, not for a request (each is decided in memory); sent again each
        // alone, its requests would each hold a connection at once: the load this batching spares.
        final: () => true,
      }),
    };
    this.#batches.set(of, batches);
    return batches;
  }

  /**
   * Alike requests (the same balances, the same cost: a key's reads) in one round trip, not a
   * transaction's four; others in a transaction that locks their balances. Decided alike either way.
   */
  async #send(requests: Spending[]): Promise<Spent[]> {
    const [first] = requests as [Spending, ...Spending[]];
    if (requests.every(({ ids, cost }) => cost === first.cost && ids.join() === first.ids.join()))
      return spendInOrder(requests, await this.#record.spendAtOnce(first.ids, first.cost, requests.length)).answer;
    const ids = [...new Set(requests.flatMap((each) => each.ids))];
    return this.#record.spendLocked(ids, (locked) => spendInOrder(requests, locked));
  }
}
