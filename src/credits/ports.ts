/**
 * What the limiter (src/rate-limit/) and the record of credits ask of each other, declared here,
 * where the record is: the limiter imports these types and nothing else of credits/, and reaches
 * the implementations through the `creditsLedger` decoration (src/credits/plugin.ts).
 */

/** A balance's seed: what was spent of it, in which version, for a store that holds none of it. */
export interface BalanceSeed {
  spent: number;
  version: number;
}

/** This instance's part of the record of credits, as the limiter spends through it (CreditLedger). */
export interface Ledger {
  /** A balance's seed, for a store that holds none of it (never seen, or flushed). */
  seed(id: number, version: number): Promise<BalanceSeed>;
  /**
   * Units spent from a balance in a version (negative: given back), kept under `subject`; written in
   * the next batch. `spentAfter`: what the store had spent of it in all once the decision was made.
   */
  spend(subject: string, id: number, version: number, units: number, spentAfter?: number): void;
  /** True for the one instance, of all, that is to tell that the balance ran out in this version. */
  exhaustedOnce(id: number, version: number): Promise<boolean>;
}

/** A balance as a store shared by every instance (Redis) holds it: its version, and what was spent of it in that version. */
export interface LiveBalance {
  id: number;
  version: number;
  spent: number;
}

/** What the record asks of a shared store: the balances it holds, as they stand now (the record follows them). */
export interface LiveBalances {
  /** These balances (by the subject the store keeps each under, and id), in order; undefined for one it holds none of. */
  read(balances: ReadonlyArray<{ subject: string; id: number }>): Promise<Array<LiveBalance | undefined>>;
  /** Every balance it holds, in batches. */
  all(): AsyncIterable<LiveBalance[]>;
}

/** A balance as its record stands: what remains of it (base - spent), in which version. */
export interface RecordedBalance {
  id: number;
  remaining: number;
  version: number;
}

/** What a transaction of the limiter's fallback makes of the balances it locked: the units it spends from each (by id), and its answer. */
export interface LockedSpending<T> {
  spend: ReadonlyMap<number, number>;
  answer: T;
}

/**
 * The records of balances (credit_balances) as the limiter's fallback spends in them while Redis is
 * unreachable (src/credits/ledger-repository.ts).
 */
export interface BalanceRecords {
  /** In one transaction locking the balances, spends what `decide` makes of them as they stand, and answers its answer. */
  spendLocked<T>(ids: readonly number[], decide: (balances: RecordedBalance[]) => LockedSpending<T>): Promise<T>;
  /**
   * `count` requests of `cost` from every one of the balances, in one statement locking them: as
   * many served, in order, as every balance holds. The balances as they stood.
   */
  spendAtOnce(ids: readonly number[], cost: number, count: number): Promise<RecordedBalance[]>;
  /** The balances as they stand, locking nothing. */
  remaining(ids: readonly number[]): Promise<RecordedBalance[]>;
  /** Gives `cost` back to each balance still in the version it was spent in. */
  giveBack(ids: readonly number[], versions: readonly number[], cost: number): Promise<void>;
}

/** What credits hands the limiter (the `creditsLedger` decoration): the records its fallback spends in, and this instance's ledger. */
export interface CreditsLedger {
  records: BalanceRecords;
  /** This instance's ledger, once: following `live` (a store shared by every instance), or adding up its own spending without it. */
  open(live: LiveBalances | undefined): Ledger;
}
