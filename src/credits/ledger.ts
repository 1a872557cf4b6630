import type { FastifyBaseLogger } from 'fastify';
import { WriteBehind } from '../platform/lib/write-behind.js';
import type { LedgerRepository } from './ledger-repository.js';
import { LiveFollower } from './live-follower.js';
import type { BalanceSeed, Ledger, LiveBalances } from './ports.js';

/** How long spending waits in memory at most before it is written: what an instance killed can leave out of the record. */
export const LEDGER_WRITE_MS = 1_000;

interface Spending {
  id: number;
  version: number;
  units: number;
}

/**
 * This instance's part of the record of credits. On a store of its own (memory): the units it
 * spent (less those refunded) per balance and version, added up in memory and written to
 * PostgreSQL in one statement at least once a second and at close; a failed write keeps them for
 * the next. On a store shared by every instance (Redis): the record follows the store's live
 * balance (LiveFollower). The live balance is the store's; the record is what a store seeds a
 * balance from when it has none (docs/decisions/credits.md).
 */
export class CreditLedger implements Ledger {
  readonly #repository: LedgerRepository;
  /** On a store of this instance's own: its spending per balance and version, written behind. */
  readonly #spending: WriteBehind<Spending> | undefined;
  /** On a store shared by every instance: the follower of its live balances, and the timer of its writes. */
  readonly #follower: LiveFollower | undefined;
  readonly #timer: NodeJS.Timeout | undefined;
  /** The balances and versions this instance has tried to tell exhausted: one mark each is enough. */
  readonly #told = new Set<string>();

  /** `live`: the store shared by every instance, whose balances the record follows; none for a store of this instance's own. */
  constructor(repository: LedgerRepository, log: FastifyBaseLogger, live?: LiveBalances) {
    this.#repository = repository;
    if (live) {
      const follower = new LiveFollower(live, repository, log);
      this.#follower = follower;
      this.#timer = setInterval(() => void follower.write(), LEDGER_WRITE_MS).unref();
      return;
    }
    this.#spending = new WriteBehind<Spending>({
      everyMs: LEDGER_WRITE_MS,
      write: (batch) =>
        repository.addSpent(
          batch.map(({ id }) => id),
          batch.map(({ version }) => version),
          batch.map(({ units }) => units),
        ),
      merge: (into, from) => (into.units += from.units),
      worthWriting: ({ units }) => units !== 0,
      failed: (error, batch) =>
        log.warn({ err: error, balances: batch.length }, 'credits: writing the spending failed; kept for the next write'),
    });
    this.#spending.start();
  }

  /**
   * The balance's seed, for a store that has none of it (a record gone, removed meanwhile,
   * counts as nothing spent), with what this instance spent from it and has not written yet: a
   * store seeded after a flush then lacks only the other instances' unwritten part. Read with no
   * write of this instance under way, so that each unit is in the record or in memory, not both.
   */
  seed(id: number, version: number): Promise<BalanceSeed> {
    const spending = this.#spending;
    if (!spending) return this.#followedSeed(id, version);
    return spending.betweenWrites(async () => {
      const record = (await this.#repository.record(id)) ?? { spent: 0, version };
      const unwritten = spending.unwritten(`${id}:${record.version}`)?.units ?? 0;
      return { ...record, spent: record.spent + unwritten };
    });
  }

  async #followedSeed(id: number, version: number) {
    return this.#follower!.seed(id, (await this.#repository.record(id)) ?? { spent: 0, version });
  }

  /**
   * Adds units spent from a balance in a version (negative: given back), kept under `subject`, to
   * be written with the next batch; `spentAfter`: the live spent the store's decision left, if told.
   */
  spend(subject: string, id: number, version: number, units: number, spentAfter?: number) {
    if (this.#spending) this.#spending.entry(`${id}:${version}`, () => ({ id, version, units: 0 })).units += units;
    else this.#follower!.spend(subject, id, version, units, spentAfter);
  }

  /**
   * Whether this instance is the one to tell that the balance ran out in this version: true once
   * per balance and version across all instances (the record's mark), asked once per instance.
   */
  async exhaustedOnce(id: number, version: number): Promise<boolean> {
    const name = `${id}:${version}`;
    if (this.#told.has(name)) return false;
    this.#told.add(name);
    return this.#repository.markExhausted(id, version).catch((error: unknown) => {
      this.#told.delete(name);
      throw error;
    });
  }

  async close() {
    clearInterval(this.#timer);
    await (this.#spending ? this.#spending.close() : this.#follower!.close());
  }
}
