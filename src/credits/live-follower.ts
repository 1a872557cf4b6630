import type { FastifyBaseLogger } from 'fastify';
import type { LedgerRepository } from './ledger-repository.js';
import type { BalanceSeed, LiveBalances } from './ports.js';

/** How long after this instance last spent from a balance it goes on following it: what outlives an instance killed meanwhile. */
export const FOLLOW_MS = 10_000;

/** A balance this instance spent from lately, as it last read it and what it did since. */
interface Followed {
  subject: string;
  id: number;
  version: number;
  /** The live spent at this instance's last read, if it read it in this version. */
  read: number | undefined;
  /** Whether a decision told the live spent since the last write: then it is fresh enough not to be read. */
  told: boolean;
  /** Units this instance spent since that read (since it started following, without one). */
  since: number;
  /** Units this instance gave back (free 304s) and has not written yet. */
  givenBack: number;
  /** The live spent this instance last wrote, if any. */
  written: number | undefined;
  touchedAt: number;
}

/**
 * The record follows a shared store's live balance (docs/decisions/credits.md): each write reads
 * the balances this instance spent from in the last FOLLOW_MS and raises their record to the live
 * spent, so what an instance killed spent and never wrote reaches the record within seconds through
 * any instance still following, and at the start of the next one (which reads every balance the
 * store holds once). Writes are absolute, so instances neither add twice nor need to agree on order.
 */
export class LiveFollower {
  readonly #live: LiveBalances;
  readonly #repository: LedgerRepository;
  readonly #log: FastifyBaseLogger;
  readonly #followed = new Map<number, Followed>();
  /** The read of every balance the store holds, under way; done once it succeeded. */
  #sweep: Promise<void> | undefined;
  #swept = false;
  #closed = false;
  #writing: Promise<void> | undefined;

  constructor(live: LiveBalances, repository: LedgerRepository, log: FastifyBaseLogger) {
    this.#live = live;
    this.#repository = repository;
    this.#log = log;
    this.#followAll();
  }

  /**
   * Units spent (negative: given back) from a balance in a version, under the subject the store
   * keeps it; `spentAfter`: the live spent the decision left, when the store told it.
   */
  spend(subject: string, id: number, version: number, units: number, spentAfter?: number) {
    let followed = this.#followed.get(id);
    if (followed?.version !== version) {
      followed = { subject, id, version, read: undefined, told: false, since: 0, givenBack: 0, written: undefined, touchedAt: 0 };
      this.#followed.set(id, followed);
    }
    // A decision answered late may tell less than one made after it: its units are in that one's already.
    if (spentAfter !== undefined && (followed.read === undefined || spentAfter >= followed.read)) {
      followed.read = spentAfter;
      followed.since = 0;
      followed.told = true;
    } else followed.since += units;
    if (units < 0) followed.givenBack -= units;
    followed.touchedAt = Date.now();
  }

  /** What this instance knows was spent live: what it last read or was told, and what it spent since. */
  #known = (followed: Followed) => (followed.read === undefined ? undefined : followed.read + followed.since);

  /**
   * A seed for a store that lost the balance (flushed): the record, or what this instance knows was
   * spent live, whichever is more; it lacks only what others spent since this one last heard.
   */
  seed(id: number, record: BalanceSeed): BalanceSeed {
    const followed = this.#followed.get(id);
    if (followed?.version !== record.version) return record;
    const known = this.#known(followed) ?? record.spent + followed.since;
    return { ...record, spent: Math.max(record.spent, known) };
  }

  /** Reads the balances followed and writes those whose live spent moved; a failed read or write waits for the next. */
  write(): Promise<void> {
    this.#followAll();
    // One at a time: a read held up by Redis makes the next timer's write wait for it, not pile up.
    this.#writing ??= this.#readAndWrite().finally(() => (this.#writing = undefined));
    return this.#writing;
  }

  /**
   * The live spent of each balance as the store holds it now; where it cannot tell (unreachable, or
   * flushed), what this instance knows of it, so that the record has it when balances are decided
   * in the record meanwhile (an outage) or seeded from it again (a flush).
   */
  async #readAndWrite() {
    const followed = [...this.#followed.values()];
    if (followed.length === 0) return;
    // Balances a decision told of since the last write are not read: only the quiet ones, to hear what others spent.
    const quiet = followed.filter((each) => !each.told);
    for (const each of followed) each.told = false;
    const sinceAtRead = quiet.map(({ since }) => since);
    const live = await this.#live.read(quiet).catch(() => []);
    const changed: Array<{ followed: Followed; spent: number; givenBack: number }> = [];
    const newer = new Set<Followed>();
    quiet.forEach((each, i) => {
      const now = live[i];
      if (each.told) return; // a decision told a fresher live spent while the read was under way
      if (now?.version === each.version) {
        each.read = now.spent;
        each.since -= sinceAtRead[i]!;
      } else if (now !== undefined) newer.add(each); // a newer version: this one's spending is no longer the record's
    });
    const targets = followed.map((each) => (newer.has(each) ? undefined : this.#known(each)));
    followed.forEach((each, i) => {
      const spent = targets[i];
      if (spent !== undefined && (spent !== each.written || each.givenBack !== 0))
        changed.push({ followed: each, spent, givenBack: each.givenBack });
    });
    if (changed.length > 0) await this.#write(changed);
    // Followed no longer: untouched for FOLLOW_MS, and the record has what this instance knows of it.
    const stale = Date.now() - FOLLOW_MS;
    followed.forEach((each, i) => {
      const settled = each.givenBack === 0 && (targets[i] === undefined || each.written === targets[i]);
      if (each.touchedAt < stale && settled && this.#followed.get(each.id) === each) this.#followed.delete(each.id);
    });
  }

  async #write(changed: Array<{ followed: Followed; spent: number; givenBack: number }>) {
    try {
      await this.#repository.followSpent(
        changed.map(({ followed }) => followed.id),
        changed.map(({ followed }) => followed.version),
        changed.map(({ spent }) => spent),
        changed.map(({ givenBack }) => givenBack),
      );
      for (const { followed, spent, givenBack } of changed) {
        followed.written = spent;
        followed.givenBack -= givenBack;
      }
    } catch (error) {
      this.#log.warn({ err: error, balances: changed.length }, 'credits: writing the spending failed; kept for the next write');
    }
  }

  /**
   * At start, until it succeeds once: every balance the store holds, so that what an instance killed
   * left unwritten is recorded even if nobody spends from it again.
   */
  #followAll() {
    if (this.#swept || this.#sweep) return;
    this.#sweep = this.#readEveryBalance()
      .then(() => {
        this.#swept = true;
      })
      .catch((error: unknown) => this.#log.warn({ err: error }, 'credits: following every balance the store holds failed; tried again'))
      .finally(() => (this.#sweep = undefined));
  }

  async #readEveryBalance() {
    for await (const batch of this.#live.all()) {
      if (this.#closed) return;
      if (batch.length === 0) continue;
      await this.#repository.followSpent(
        batch.map(({ id }) => id),
        batch.map(({ version }) => version),
        batch.map(({ spent }) => spent),
        batch.map(() => 0),
      );
    }
  }

  async close() {
    this.#closed = true;
    await this.#sweep;
    await this.write();
  }
}
