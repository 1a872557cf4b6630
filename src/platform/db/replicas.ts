import type { FastifyBaseLogger } from 'fastify';
import { hasCode } from '../domain-errors.js';
import type { Database, Queryable, Statement } from './database.js';
import { DATABASE_CODES } from './errors.js';
import { createPostgresDatabase, type PostgresOptions } from './postgres.js';
import { hasReplayed, insertedWalEnd, lagMs, parseLsn, withSample, type WalLayout, type WalSample } from './wal-position.js';

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

interface Cluster {
  layout: WalLayout;
  systemIdentifier: string;
}

/**
 * The primary as the router knows it: its cluster (read once: replicas are polled from then on),
 * `required`, the position after the last change of pets known, and its recent positions, which
 * tell how long a replica has been behind.
 */
function trackPrimary(
  primary: Database,
  { keptMs, now, onFirstPosition }: { keptMs: number; now: () => number; onFirstPosition: () => void },
) {
  let required = 0n;
  /** Changes whose position is not known yet: while any, reads go to the primary. */
  let unsettled = 0;
  /** Changes waiting for the next read of the primary's position (one read under way covers only those before it). */
  let queued = 0;
  let reading = false;
  let cluster: Cluster | undefined;
  /** The primary's positions and when they were read, oldest first, for keptMs. */
  let history: WalSample[] = [];
  const bounds = { spacingMs: SAMPLE_SPACING_MS, keptMs };

  async function readCluster(): Promise<Cluster> {
    const [row] = await primary.query<{ block: number; segment: number; system: string }>(
      "SELECT current_setting('wal_block_size')::int AS block, pg_size_bytes(current_setting('wal_segment_size'))::int AS segment, " +
        'system_identifier::text AS system FROM pg_control_system()',
    );
    return { layout: { blockSize: row!.block, segmentSize: row!.segment }, systemIdentifier: row!.system };
  }

  /** Reads the primary's position once for every change queued so far; queued changes are read again after a failure. */
  function read() {
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
        const first = history.length === 0;
        history = withSample(history, { at: now(), lsn }, bounds);
        // The replicas are polled at once, not at the next tick: until then a new instance reads all on the primary.
        if (first) onFirstPosition();
        reading = false;
        if (queued > 0) read();
      } catch {
        queued += settling;
        reading = false;
      }
    })();
  }

  return {
    read,
    changed() {
      unsettled++;
      queued++;
      read();
    },
    get cluster() {
      return cluster;
    },
    get required() {
      return required;
    },
    /** Every change's position is known. */
    settled: () => unsettled === 0,
    lagOf: (replayed: bigint) => lagMs(history, replayed, now(), keptMs),
  };
}

type PrimaryPosition = ReturnType<typeof trackPrimary>;

/**
 * Why a replica that answered takes no reads, if it does not: a server not in recovery has no
 * replay position, and a standby of another cluster replays other WAL, into other rows.
 */
function refusalOf({ lsn, system }: { lsn: string | null; system: string }, primarySystem: string): ReplicaRefusal | undefined {
  if (lsn === null) return 'not_in_recovery';
  if (system !== primarySystem) return 'other_cluster';
  return undefined;
}

/** Reads the replica's replay position and identity, once the primary's are known: the replica's is compared with it. */
async function poll(replica: Replica, primary: PrimaryPosition, log: FastifyBaseLogger, now: () => number) {
  const cluster = primary.cluster;
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
  if (replica.replayed !== undefined) replica.lagMs = primary.lagOf(replica.replayed);
}

/** A replica takes reads when its last poll answered, recently, from a standby of the primary's cluster close enough behind. */
const available = (replica: Replica, at: number, maxLagMs: number) =>
  replica.reachable &&
  !replica.refused &&
  replica.replayed !== undefined &&
  at - replica.polledAt <= STALE_POLL_MS &&
  replica.lagMs <= maxLagMs;

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
  const pollAll = () => {
    for (const replica of replicas) void poll(replica, position, log, now);
  };
  const position = trackPrimary(primary, { keptMs: 2 * maxLagMs, now, onFirstPosition: pollAll });
  let next = 0;

  const timer = setInterval(() => {
    position.read();
    pollAll();
  }, pollMs).unref();
  // The replicas are polled once the primary's identity and position are known.
  position.read();

  /** A replica that has replayed every change known, round robin; undefined for the primary. */
  function pick(): Replica | undefined {
    if (!position.settled()) return undefined;
    for (let tried = 0; tried < replicas.length; tried++) {
      const replica = replicas[next++ % replicas.length]!;
      if (available(replica, now(), maxLagMs) && hasReplayed(replica.replayed, position.required)) return replica;
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
    changed: () => position.changed(),
    stats: () => ({
      reads: { ...reads },
      replicas: replicas.map((replica) => ({
        name: replica.name,
        lagSeconds: replica.lagMs / 1000,
        available: available(replica, now(), maxLagMs),
        refused: replica.refused,
      })),
    }),
    async close() {
      clearInterval(timer);
      await Promise.all(replicas.map((replica) => replica.db.close()));
    },
  };
}
