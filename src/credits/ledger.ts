import type { FastifyBaseLogger } from 'fastify';
import type { CreditRecord, LedgerRepository } from './ledger-repository.js';
import { LiveFollower, type LiveBalances } from './live-follower.js';

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
export class CreditLedger {
  readonly #repository: LedgerRepository;
  readonly #log: FastifyBaseLogger;
  readonly #pending = new Map<string, Spending>();
  /** The balances and versions this instance has tried to tell exhausted: one mark each is enough. */
  readonly #told = new Set<string>();
  readonly #timer: NodeJS.Timeout;
  /** The write or seed read under way, if any: one at a time. */
  #busy: Promise<void> | undefined;
  readonly #follower: LiveFollower | undefined;

  /** `live`: the store shared by every instance, whose balances the record follows; none for a store of this instance's own. */
  constructor(repository: LedgerRepository, log: FastifyBaseLogger, live?: LiveBalances) {
    this.#repository = repository;
    this.#log = log;
    this.#follower = live && new LiveFollower(live, repository, log);
    this.#timer = setInterval(() => void this.write(), LEDGER_WRITE_MS).unref();
  }

  /**
   * The balance's record, to seed a store that has none of it (a record gone, removed meanwhile,
   * counts as nothing spent), with what this instance spent from it and has not written yet: a
   * store seeded after a flush then lacks only the other instances' unwritten part. Read with no
   * write of this instance under way, so that each unit is in the record or in memory, not both.
   */
  record(id: number, version: number): Promise<CreditRecord> {
    if (this.#follower) return this.#followedRecord(id, version);
    return this.#alone(async () => {
      const record = (await this.#repository.record(id)) ?? { spent: 0, version };
      const unwritten = this.#pending.get(`${id}:${record.version}`)?.units ?? 0;
      return { ...record, spent: record.spent + unwritten };
    });
  }

  async #followedRecord(id: number, version: number) {
    return this.#follower!.seed(id, (await this.#repository.record(id)) ?? { spent: 0, version });
  }

  /**
   * Adds units spent from a balance in a version (negative: given back), kept under `subject`, to
   * be written with the next batch; `spentAfter`: the live spent the store's decision left, if told.
   */
  spend(subject: string, id: number, version: number, units: number, spentAfter?: number) {
    if (this.#follower) this.#follower.spend(subject, id, version, units, spentAfter);
    else this.#add(id, version, units);
  }

  #add(id: number, version: number, units: number) {
    const name = `${id}:${version}`;
    const spending = this.#pending.get(name);
    if (spending) spending.units += units;
    else this.#pending.set(name, { id, version, units });
  }

  /** Writes what was spent since the last write, after any write under way; on failure keeps it for the next. */
  write(): Promise<void> {
    if (this.#follower) return this.#follower.write();
    return this.#alone(async () => {
      const batch = [...this.#pending.values()].filter(({ units }) => units !== 0);
      this.#pending.clear();
      if (batch.length === 0) return;
      await this.#repository
        .addSpent(
          batch.map(({ id }) => id),
          batch.map(({ version }) => version),
          batch.map(({ units }) => units),
        )
        .catch((error: unknown) => {
          this.#log.warn({ err: error, balances: batch.length }, 'credits: writing the spending failed; kept for the next write');
          for (const { id, version, units } of batch) this.#add(id, version, units);
        });
    });
  }

  /** Runs `work` once no write or seed read of this instance is under way, holding off the next until it ends. */
  async #alone<T>(work: () => Promise<T>): Promise<T> {
    while (this.#busy) await this.#busy;
    const running = work();
    const busy = running.then(
      () => undefined,
      () => undefined,
    );
    this.#busy = busy;
    void busy.then(() => {
      if (this.#busy === busy) this.#busy = undefined;
    });
    return running;
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
    await (this.#follower ? this.#follower.close() : this.write());
  }
}
