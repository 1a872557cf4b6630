import { setTimeout as sleep } from 'node:timers/promises';
import type { Queryable } from './database.js';

const statement = { name: 'notice_barrier', text: 'SELECT pg_notify($1, $2)' } as const;

/**
 * Makes sure every notice committed before a call has been heard: sends a notice of its own on a
 * channel the same listening connection hears (its `channel`, which the listener hands to
 * `heard`), and waits for it. PostgreSQL delivers the notices of different transactions in the
 * order they committed (NOTIFY's documentation), so once it is heard, so are all before it. One
 * round trip at a time, whoever asks: a call made while one is under way waits for the next, since
 * the one under way may have been sent before what the caller waits for was committed. Rounds start
 * `minIntervalMs` apart at least, so callers asking without end (a banned address's flood of
 * made-up keys) cost the database a few statements a second, not one per round trip.
 */
export class NoticeBarrier {
  readonly #db: Queryable;
  readonly channel: string;
  readonly #timeoutMs: number;
  readonly #applied: () => Promise<unknown>;
  readonly #onSend: () => void;
  readonly #minIntervalMs: number;
  #sent = 0;
  #startedAt = -Infinity;
  #waiting: { token: string; heard: () => void } | undefined;
  #underWay: Promise<boolean> | undefined;
  #next: Promise<boolean> | undefined;

  /**
   * `applied` is what must finish, once the notice is heard, for every notice before it to have
   * been applied; a round that takes longer than `timeoutMs` in all does not pass.
   */
  constructor(
    db: Queryable,
    channel: string,
    {
      timeoutMs,
      minIntervalMs,
      applied,
      onSend,
    }: { timeoutMs: number; minIntervalMs: number; applied: () => Promise<unknown>; onSend: () => void },
  ) {
    this.#db = db;
    this.channel = channel;
    this.#timeoutMs = timeoutMs;
    this.#applied = applied;
    this.#onSend = onSend;
    this.#minIntervalMs = minIntervalMs;
  }

  /** True once every notice committed before the call has been heard and applied; false when that was not made sure of in time. */
  pass(): Promise<boolean> {
    if (this.#next) return this.#next;
    if (!this.#underWay && this.#untilNextStart() <= 0) return this.#start();
    this.#next = (async () => {
      await this.#underWay;
      // A timer may fire a fraction of a millisecond before the clock read here says it is due.
      for (let wait = this.#untilNextStart(); wait > 0; wait = this.#untilNextStart()) await sleep(Math.ceil(wait));
      this.#next = undefined;
      return this.#start();
    })();
    return this.#next;
  }

  /** A notice on `channel`, from the listener. */
  heard(token: string) {
    if (this.#waiting?.token === token) this.#waiting.heard();
  }

  /**
   * The listening connection is back after a loss: the notice under way may be lost with others.
   * It counts as heard, since the listener reads everything again then (see Database.listen).
   */
  resubscribed() {
    this.#waiting?.heard();
  }

  #untilNextStart(): number {
    return this.#startedAt + this.#minIntervalMs - performance.now();
  }

  #start(): Promise<boolean> {
    this.#startedAt = performance.now();
    const round = this.#round().finally(() => {
      if (this.#underWay === round) this.#underWay = undefined;
    });
    this.#underWay = round;
    return round;
  }

  async #round(): Promise<boolean> {
    const token = String(++this.#sent);
    let settle!: (passed: boolean) => void;
    const passed = new Promise<boolean>((resolve) => (settle = resolve));
    this.#waiting = {
      token,
      heard: () =>
        void this.#applied().then(
          () => settle(true),
          () => settle(false),
        ),
    };
    // Also over a database that does not answer: the statement may outlast the round, never the caller's wait.
    const timer = setTimeout(() => settle(false), this.#timeoutMs).unref();
    this.#onSend();
    this.#db.query(statement, [this.channel, token]).catch(() => settle(false));
    try {
      return await passed;
    } finally {
      clearTimeout(timer);
      this.#waiting = undefined;
    }
  }
}
