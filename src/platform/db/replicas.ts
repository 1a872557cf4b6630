import type { FastifyBaseLogger } from 'fastify';
import { hasCode } from '../domain-errors.js';
import type { Database, Queryable, Statement } from './database.js';
import { DATABASE_CODES } from './errors.js';
import { createPostgresDatabase, type PostgresOptions } from './postgres.js';

/**
 * Reads spread over PostgreSQL streaming replicas without giving up read-your-writes. The
 * instance keeps `required`, the primary's WAL position after the last change of pets it knows
 * of (its own commits and every pets_changed notice), and polls each replica's replay position:
 * a read goes to a replica that has replayed past `required`, round robin among those, and
 * otherwise to the primary. Between a change and the moment its position is known, every read
 * goes to the primary; so does every read until the primary's position has been read once and a
 * replica has replayed it (a new instance knows of no change, but the replica may be far behind).
 * A replica that is not a standby of the primary's cluster is refused.
 */
export interface ReplicaReads extends Queryable {
  /** Like query, but rows a replica did not have are asked of the primary before the answer is "none". */
  queryConfirmingEmpty<Row>(statement: Statement | string, params?: readonly unknown[]): Promise<Row[]>;
  /** A change of pets has committed, or was announced: reads wait for a replica that has replayed it. */
  changed(): void;
  /** Reads served by each target so far, and each replica's state now, for metrics. */
  stats(): ReplicaStats;
  close(): Promise<void>;
}

export interface ReplicaStats {
  reads: Record<ReadTarget, number>;
  replicas: Array<{ name: string; lagSeconds: number; available: boolean; refused: ReplicaRefusal | undefined }>;
}

/** Why a replica that answers takes no reads: a standby of another cluster, or no standby at all. */
export const REPLICA_REFUSALS = ['other_cluster', 'not_in_recovery'] as const;
export type ReplicaRefusal = (typeof REPLICA_REFUSALS)[number];

const REFUSAL_MESSAGES: Record<ReplicaRefusal, string> = {
  other_cluster: 'read replica refused: a standby of another cluster than the primary (its system identifier differs)',
  not_in_recovery: 'read replica refused: not in recovery (promoted, or not a standby)',
};

export type ReadTarget = 'primary' | 'replica';

export interface ReplicaOptions extends Omit<
  PostgresOptions,
  'connectionString' | 'listenConnectionString' | 'connectTimeoutMs' | 'queryTimeoutMs'
> {
  urls: string[];
  /** A replica behind the primary for longer than this takes no reads. */
  maxLagMs: number;
  /** How long a read (or a poll) waits for a connection to a replica, and then for its answer, before the primary answers it. */
  timeoutMs: number;
  /** How often the positions are read. */
  pollMs?: number;
  /** Where a refused replica is reported. */
  log: FastifyBaseLogger;
}

const POLL_MS = 200;
/** A replica whose position could not be read for this long is treated as gone (frozen, or its answers lost). */
const STALE_POLL_MS = 1_000;
/** Positions of the primary closer together than this are kept as one sample. */
const SAMPLE_SPACING_MS = 50;

/** A WAL position, 'X/Y' in hexadecimal (the high and low 32 bits), as a number that compares correctly. */
export function parseLsn(text: string): bigint {
  const match = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(text);
  if (!match) throw new Error(`Not a WAL position: ${JSON.stringify(text)}`);
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

export interface WalLayout {
  blockSize: number;
  segmentSize: number;
}

/** Sizes of the page headers WAL pages begin with: the long one on a segment's first page. */
const SHORT_PAGE_HEADER = 24n;
const LONG_PAGE_HEADER = 40n;

/**
 * The end of all WAL inserted, from pg_current_wal_insert_lsn(). The insert position includes
 * every commit made so far, also one not yet flushed (synchronous_commit off), but when the last
 * record ended exactly at a page boundary it points past the next page's header, where a replica
 * that has replayed everything reports the boundary itself.
 */
export function insertedWalEnd(insertLsn: bigint, { blockSize, segmentSize }: WalLayout): bigint {
  if (insertLsn % BigInt(segmentSize) === LONG_PAGE_HEADER) return insertLsn - LONG_PAGE_HEADER;
  if (insertLsn % BigInt(blockSize) === SHORT_PAGE_HEADER) return insertLsn - SHORT_PAGE_HEADER;
  return insertLsn;
}

interface Replica {
  name: string;
  db: Database;
  /** The last replay position read; a lower bound of where it is now. */
  replayed?: bigint;
  polledAt: number;
  lagMs: number;
  /** False from a failed poll or read until a poll succeeds again. */
  reachable: boolean;
  /** Set by the last poll answered. */
  refused?: ReplicaRefusal;
  polling: boolean;
}

/** The host, port and database of a URL: a replica's name in metrics and logs, without its credentials. */
export function replicaName(url: string): string {
  const parsed = new URL(url);
  return `${parsed.host}${parsed.pathname}`;
}

export function createReplicaReads(primary: Database, options: ReplicaOptions, now: () => number = Date.now): ReplicaReads {
  const { urls, maxLagMs, timeoutMs, pollMs = POLL_MS, log, ...postgres } = options;
  const replicas: Replica[] = urls.map((url) => ({
    name: replicaName(url),
    // A replica that stops answering (its connections black-holed) must not hold a read for the primary's 5 and 10 s.
    db: createPostgresDatabase({ ...postgres, connectionString: url, connectTimeoutMs: timeoutMs, queryTimeoutMs: timeoutMs }),
    polledAt: 0,
    lagMs: 0,
    reachable: false,
    polling: false,
  }));
  const reads: Record<ReadTarget, number> = { primary: 0, replica: 0 };
  let required = 0n;
  /** Changes whose position is not known yet: while any, reads go to the primary. */
  let unsettled = 0;
  /** Changes waiting for the next read of the primary's position (one read under way covers only those before it). */
  let queued = 0;
  let reading = false;
  /** The primary's, read once: replicas are polled from then on. */
  let cluster: { layout: WalLayout; systemIdentifier: string } | undefined;
  /** The primary's positions and when they were read, oldest first, for this long: how long a replica has been behind. */
  const samples: Array<{ at: number; lsn: bigint }> = [];
  const keptMs = 2 * maxLagMs;
  let next = 0;

  async function readCluster() {
    const [row] = await primary.query<{ block: number; segment: number; system: string }>(
      "SELECT current_setting('wal_block_size')::int AS block, pg_size_bytes(current_setting('wal_segment_size'))::int AS segment, " +
        'system_identifier::text AS system FROM pg_control_system()',
    );
    return { layout: { blockSize: row!.block, segmentSize: row!.segment }, systemIdentifier: row!.system };
  }

  /** Reads the primary's position once for every change queued so far; queued changes are read again after a failure. */
  function readPrimary() {
    if (reading) return;
    reading = true;
    const settling = queued;
    queued = 0;
    void (async () => {
      try {
        cluster ??= await readCluster();
        const [row] = await primary.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
        const lsn = insertedWalEnd(parseLsn(row!.lsn), cluster.layout);
        if (settling > 0 && lsn > required) required = lsn;
        unsettled -= settling;
        const first = samples.length === 0;
        record(lsn);
        // The replicas are polled at once, not at the next tick: until then a new instance reads all on the primary.
        if (first) for (const replica of replicas) void poll(replica);
        reading = false;
        if (queued > 0) readPrimary();
      } catch {
        queued += settling;
        reading = false;
      }
    })();
  }

  function record(lsn: bigint) {
    const at = now();
    const last = samples.at(-1);
    if (!last || at - last.at >= SAMPLE_SPACING_MS) samples.push({ at, lsn });
    else if (lsn > last.lsn) last.lsn = lsn;
    while (samples.length > 1 && samples[0]!.at < at - keptMs) samples.shift();
  }

  /**
   * How long the replica has been behind: since the first position of the primary it has not
   * replayed. Behind the oldest position kept (at start, the primary's first one, or before any),
   * it has been behind for longer than the positions tell: at least as long as they are kept.
   */
  function lagOf(replayed: bigint): number {
    const behindSince = samples.findIndex((sample) => sample.lsn > replayed);
    if (behindSince > 0) return now() - samples[behindSince]!.at;
    if (behindSince === -1 && samples.length > 0) return 0;
    return Math.max(keptMs, now() - (samples[0]?.at ?? now()));
  }

  /**
   * Why a replica that answered takes no reads, if it does not: a server not in recovery has no
   * replay position, and a standby of another cluster replays other WAL, into other rows.
   */
  function refusalOf({ lsn, system }: { lsn: string | null; system: string }, primarySystem: string): ReplicaRefusal | undefined {
    if (lsn === null) return 'not_in_recovery';
    if (system !== primarySystem) return 'other_cluster';
    return undefined;
  }

  async function poll(replica: Replica) {
    // Not before the primary's identity is known: the replica's is compared with it.
    if (replica.polling || !cluster) return;
    replica.polling = true;
    try {
      const [row] = await replica.db.query<{ lsn: string | null; system: string }>(
        'SELECT pg_last_wal_replay_lsn()::text AS lsn, system_identifier::text AS system FROM pg_control_system()',
      );
      const refused = refusalOf(row!, cluster.systemIdentifier);
      if (refused && refused !== replica.refused) {
        log.warn(
          { replica: replica.name, systemIdentifier: row!.system, primarySystemIdentifier: cluster.systemIdentifier },
          REFUSAL_MESSAGES[refused],
        );
      }
      replica.refused = refused;
      replica.reachable = true;
      if (!refused) {
        replica.replayed = parseLsn(row!.lsn!);
        replica.polledAt = now();
      }
    } catch {
      replica.reachable = false;
    } finally {
      replica.polling = false;
    }
    if (replica.replayed !== undefined) replica.lagMs = lagOf(replica.replayed);
  }

  const timer = setInterval(() => {
    readPrimary();
    for (const replica of replicas) void poll(replica);
  }, pollMs).unref();
  // The replicas are polled once the primary's identity and position are known.
  readPrimary();

  const available = (replica: Replica) =>
    replica.reachable &&
    !replica.refused &&
    replica.replayed !== undefined &&
    now() - replica.polledAt <= STALE_POLL_MS &&
    replica.lagMs <= maxLagMs;

  function pick(): Replica | undefined {
    if (unsettled > 0) return undefined;
    for (let tried = 0; tried < replicas.length; tried++) {
      const replica = replicas[next++ % replicas.length]!;
      if (available(replica) && replica.replayed! >= required) return replica;
    }
    return undefined;
  }

  async function onPrimary<Row>(statement: Statement | string, params?: readonly unknown[]): Promise<Row[]> {
    reads.primary++;
    return primary.query<Row>(statement, params);
  }

  async function query<Row>(statement: Statement | string, params: readonly unknown[] | undefined, confirmEmpty: boolean) {
    const replica = pick();
    if (!replica) return onPrimary<Row>(statement, params);
    let rows: Row[];
    try {
      rows = await replica.db.query<Row>(statement, params);
    } catch (error) {
      // Whatever failed there (gone, or a query cancelled by a conflict with recovery) is asked of the primary.
      if (hasCode(error, DATABASE_CODES.unavailable)) replica.reachable = false;
      return onPrimary<Row>(statement, params);
    }
    if (confirmEmpty && rows.length === 0) return onPrimary<Row>(statement, params);
    reads.replica++;
    return rows;
  }

  return {
    query: (statement, params) => query(statement, params, false),
    queryConfirmingEmpty: (statement, params) => query(statement, params, true),
    changed() {
      unsettled++;
      queued++;
      readPrimary();
    },
    stats: () => ({
      reads: { ...reads },
      replicas: replicas.map((replica) => ({
        name: replica.name,
        lagSeconds: replica.lagMs / 1000,
        available: available(replica),
        refused: replica.refused,
      })),
    }),
    async close() {
      clearInterval(timer);
      await Promise.all(replicas.map((replica) => replica.db.close()));
    },
  };
}
