/**
 * The arithmetic of WAL positions the replica router (replicas.ts) decides by: positions as
 * numbers, the end of the WAL a primary has inserted, how long a replica has been behind the
 * primary's recent positions, and whether it has replayed a position. Pure: no server, no clock.
 */

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

/** Whether a replica whose last known replay position is `replayed` (undefined: none known) has replayed `required`. */
export const hasReplayed = (replayed: bigint | undefined, required: bigint): boolean => replayed !== undefined && replayed >= required;

/** A position of the primary and when it was read (ms). */
export interface WalSample {
  at: number;
  lsn: bigint;
}

/** How the primary's recent positions are kept: at most one sample per `spacingMs`, for `keptMs`. */
export interface WalHistoryBounds {
  spacingMs: number;
  keptMs: number;
}

/**
 * The primary's positions, oldest first, with `sample` added: as a new sample once `spacingMs`
 * have passed since the last one, else as the last one's position if further; samples older than
 * `keptMs` before it are dropped, all but the newest.
 */
export function withSample(history: readonly WalSample[], sample: WalSample, { spacingMs, keptMs }: WalHistoryBounds): WalSample[] {
  const last = history.at(-1);
  const samples =
    !last || sample.at - last.at >= spacingMs
      ? [...history, sample]
      : [...history.slice(0, -1), { at: last.at, lsn: sample.lsn > last.lsn ? sample.lsn : last.lsn }];
  let oldestKept = 0;
  while (oldestKept < samples.length - 1 && samples[oldestKept]!.at < sample.at - keptMs) oldestKept++;
  return samples.slice(oldestKept);
}

/**
 * How long, at `at`, a replica that has replayed `replayed` has been behind: since the first
 * position of the primary it has not replayed. Behind the oldest position kept (at start, the
 * primary's first one, or before any), it has been behind for longer than the positions tell: at
 * least as long as they are kept.
 */
export function lagMs(history: readonly WalSample[], replayed: bigint, at: number, keptMs: number): number {
  const behindSince = history.findIndex((sample) => sample.lsn > replayed);
  if (behindSince > 0) return at - history[behindSince]!.at;
  if (behindSince === -1 && history.length > 0) return 0;
  return Math.max(keptMs, at - (history[0]?.at ?? at));
}
