import type { Queryable } from './database.js';

const statement = { name: 'notice_barrier', text: 'SELECT pg_notify($1, $2)' } as const;

/**
 * Makes sure every notice committed before a call has been heard: sends a notice of its own on a
 * channel the same listening connection hears (its `channel`, which the listener hands to
 * `heard`), and waits for it. PostgreSQL delivers the notices of different transactions in the
 * order they committed (NOTIFY's documentation), so once it is heard, so are all before it. One
 * round trip at a time, whoever asks: a call made while one is under way waits for the next, since
 * the one under way may have been sent before what the caller waits for was committed.
 */
export class NoticeBarrier {
  readonly #db: Queryable;
  readonly channel: string;
  readonly #timeoutMs: number;
  readonly #onSend: () => void;
  #sent = 0;
  #waiting: { token: string; heard: () => void } | undefined;
  #underWay: Promise<boolean> | undefined;
  #next: Promise<boolean> | undefined;

  constructor(db: Queryable, channel: string, { timeoutMs, onSend }: { timeoutMs: number; onSend: () => void }) {
    this.#db = db;
    this.channel = channel;
    this.#timeoutMs = timeoutMs;
    this.#onSend = onSend;
  }

  /** True once every notice committed before the call has been heard; false when that was not made sure of within the timeout. */
  pass(): Promise<boolean> {
    if (!this.#underWay) return this.#start();
    this.#next ??= this.#underWay.then(() => {
      this.#next = undefined;
      return this.#start();
    });
    return this.#next;
  }

  /** A notice on `channel`, from the listener. */
  heard(token: string) {
    if (this.#waiting?.token === token) this.#waiting.heard();
  }

  /**
   * The listening connection is back after a loss: the notice under way may be lost with others.
   * It counts as heard, since the listener reads everything again (see Database.listen).
   */
  resubscribed() {
    this.#waiting?.heard();
  }

  #start(): Promise<boolean> {
    const round = this.#round().finally(() => {
      if (this.#underWay === round) this.#underWay = undefined;
    });
    this.#underWay = round;
    return round;
  }

  async #round(): Promise<boolean> {
    const token = String(++this.#sent);
    let timer: NodeJS.Timeout | undefined;
    const heard = new Promise<boolean>((resolve) => {
      this.#waiting = { token, heard: () => resolve(true) };
      timer = setTimeout(() => resolve(false), this.#timeoutMs).unref();
    });
    try {
      this.#onSend();
      await this.#db.query(statement, [this.channel, token]);
      return await heard;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
      this.#waiting = undefined;
    }
  }
}
