/**
 * The one seam between the service and its SQL engine: PostgreSQL through a pg Pool, or PGlite
 * in process. Repositories take a Database, so the server, the CLI, tests and the benchmark share them.
 */
export interface Statement {
  /** A name makes pg prepare the statement once per connection and reuse it. */
  readonly name?: string;
  readonly text: string;
  /** Rows as arrays of column values: no object per row to build and throw away. */
  readonly rowMode?: 'array';
}

export interface Queryable {
  query<Row>(statement: Statement | string, params?: readonly unknown[]): Promise<Row[]>;
}

export interface Transaction extends Queryable {
  /** Runs a script of several statements without parameters (migrations). */
  runScript(sql: string): Promise<void>;
  /** Runs once the transaction has committed, when what it wrote is visible to everyone; never after a rollback. */
  afterCommit(callback: () => void): void;
}

export interface Database extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  transaction<T>(work: (tx: Transaction) => Promise<T>): Promise<T>;
  /**
   * Calls onNotify with the payload of each NOTIFY on the channel (or channels: one connection
   * hears them all, in the order their transactions committed). Notifications sent while the
   * listening connection was lost are gone, so onResubscribe runs each time it is back.
   * Resolves, once listening, to a function that stops.
   */
  listen(
    channel: string | readonly string[],
    onNotify: (payload: string, channel: string) => void,
    onResubscribe: () => void,
  ): Promise<() => Promise<void>>;
  close(): Promise<void>;
  /** Connections of a pool, for metrics and load shedding; the embedded engine has none. */
  poolStats?(): { total: number; idle: number; waiting: number };
}

/** Runs a change in the caller's transaction (an Idempotency-Key's), or in one of its own. */
export const atomically = <T>(db: Database, tx: Queryable | undefined, work: (target: Queryable) => Promise<T>): Promise<T> =>
  tx ? work(tx) : db.transaction(work);
