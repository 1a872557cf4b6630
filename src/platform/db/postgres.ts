import pg from 'pg';
import type { Database, Statement, Transaction } from './database.js';
import { DatabaseUnavailableError } from './errors.js';

/**
 * Bounded waits, so that a half-dead connection cannot hang a request: for a connection, for an
 * answer, and TCP keep-alive so a silently dropped peer (a failover, a NAT) is noticed.
 */
const CONNECTION_TIMEOUTS = { connectionTimeoutMillis: 5_000, keepAlive: true, keepAliveInitialDelayMillis: 10_000 };
const POOL_TIMEOUTS = { ...CONNECTION_TIMEOUTS, query_timeout: 10_000, idleTimeoutMillis: 30_000 };

// Identifiers are bigint; every value the API stores fits in 2^53 - 1, so a JS number is exact.
const types = new pg.TypeOverrides();
types.setTypeParser(pg.types.builtins.INT8, Number);

export interface PostgresOptions {
  connectionString: string;
  /** LISTEN's own session; by default connectionString. */
  listenConnectionString?: string;
  /** Named statements (prepared once per connection); off, every statement is unnamed, as a transaction pooler needs. */
  preparedStatements?: boolean;
  max?: number;
  /** How long getting a connection (a new one, or a turn for a pooled one) may take; 5 s by default. */
  connectTimeoutMs?: number;
  /** How long an answer may take; 10 s by default. */
  queryTimeoutMs?: number;
}

export function createPostgresDatabase({
  connectionString,
  listenConnectionString = connectionString,
  preparedStatements = true,
  max = 10,
  connectTimeoutMs = POOL_TIMEOUTS.connectionTimeoutMillis,
  queryTimeoutMs = POOL_TIMEOUTS.query_timeout,
}: PostgresOptions): Database & { pool: pg.Pool } {
  const pool = new pg.Pool({
    connectionString,
    max,
    types,
    ...POOL_TIMEOUTS,
    connectionTimeoutMillis: connectTimeoutMs,
    query_timeout: queryTimeoutMs,
  });
  // An idle client losing its connection (database restart) must not crash the process.
  pool.on('error', () => {});
  const run = preparedStatements ? runNamed : runUnnamed;

  return {
    kind: 'postgres',
    pool,
    query: (statement, params) => run(pool, statement, params),
    async transaction(work) {
      const client = await pool.connect().catch((error: unknown) => {
        throw unavailableOr(error);
      });
      // The pool stops listening to a client it hands out: a connection lost between two
      // statements (a failover, a pooler's restart) would be an uncaught error. The next statement fails instead.
      client.on('error', ignoreError);
      const committed: Array<() => void> = [];
      let result: Awaited<ReturnType<typeof work>>;
      try {
        await run(client, 'BEGIN');
        result = await work({
          query: (statement, params) => run(client, statement, params),
          runScript: async (sql) => {
            await client.query(sql);
          },
          afterCommit: (callback) => committed.push(callback),
        } satisfies Transaction);
        await run(client, 'COMMIT');
      } catch (error) {
        // A connection that cannot even roll back is broken: it leaves the pool instead of going back.
        const rolledBack = await client.query('ROLLBACK').then(
          () => true,
          () => false,
        );
        client.removeListener('error', ignoreError);
        client.release(!rolledBack);
        throw error;
      }
      client.removeListener('error', ignoreError);
      client.release();
      for (const callback of committed) callback();
      return result;
    },
    listen: (channel, onNotify, onResubscribe) =>
      listen({ connectionString: listenConnectionString, types, ...CONNECTION_TIMEOUTS }, channel, onNotify, onResubscribe),
    close: () => pool.end(),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
  };
}

type Target = pg.Pool | pg.PoolClient;

const ignoreError = () => {};

async function runNamed<Row>(target: Target, statement: Statement | string, params: readonly unknown[] = []): Promise<Row[]> {
  const { name, text, rowMode }: Statement = typeof statement === 'string' ? { text: statement } : statement;
  try {
    const result = await target.query<Row & pg.QueryResultRow>({ name, text, rowMode, values: params as unknown[] } as pg.QueryConfig);
    return result.rows;
  } catch (error) {
    throw unavailableOr(error);
  }
}

const runUnnamed = <Row>(target: Target, statement: Statement | string, params?: readonly unknown[]) =>
  runNamed<Row>(target, typeof statement === 'string' ? statement : { text: statement.text, rowMode: statement.rowMode }, params);

const unavailableOr = (error: unknown) => (isUnavailable(error) ? new DatabaseUnavailableError({ cause: error }) : error);

/** SQLSTATE classes and socket errors that mean "not now", as opposed to a wrong query. */
const UNAVAILABLE_SQLSTATE = /^(08|57P0|53300)/;
const UNAVAILABLE_SOCKET = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH']);

function isUnavailable(error: unknown): boolean {
  const { code, message } = error as { code?: string; message?: string };
  if (code && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_SOCKET.has(code))) return true;
  // pg reports a lost connection and an exhausted wait for one only in words.
  return /Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error/.test(
    message ?? '',
  );
}

/** How soon a lost listening connection is tried again. */
const RELISTEN_MS = 500;

/** LISTEN on a connection of its own, reconnecting for as long as the listener is wanted. */
async function listen(
  config: pg.ClientConfig,
  channel: string | readonly string[],
  onNotify: (payload: string, channel: string) => void,
  onResubscribe: () => void,
): Promise<() => Promise<void>> {
  const channels = new Set(typeof channel === 'string' ? [channel] : channel);
  let client: pg.Client | undefined;
  let stopped = false;
  let retry: NodeJS.Timeout | undefined;

  const scheduleReconnect = () => {
    clearTimeout(retry);
    if (!stopped) retry = setTimeout(() => void connect().then(onResubscribe, scheduleReconnect), RELISTEN_MS).unref();
  };

  async function connect() {
    const next = new pg.Client(config);
    next.on('notification', (message) => {
      if (channels.has(message.channel)) onNotify(message.payload ?? '', message.channel);
    });
    next.on('error', () => {});
    next.on('end', () => {
      if (client === next) scheduleReconnect();
    });
    try {
      await next.connect();
      await next.query([...channels].map((name) => `LISTEN ${next.escapeIdentifier(name)}`).join('; '));
    } catch (error) {
      await next.end().catch(() => {});
      throw error;
    }
    client = next;
  }

  await connect();
  return async () => {
    stopped = true;
    clearTimeout(retry);
    await client?.end();
  };
}
