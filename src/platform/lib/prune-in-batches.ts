/**
 * Deletes what `prune` deletes, at most `batch` rows a statement, until one deletes fewer or
 * `stopped` says so: no statement holds many rows (or the database) for long. How many were deleted.
 */
export async function pruneInBatches(prune: (batch: number) => Promise<number>, batch: number, stopped: () => boolean): Promise<number> {
  let pruned = 0;
  let deleted: number;
  do {
    deleted = await prune(batch);
    pruned += deleted;
  } while (deleted === batch && !stopped());
  return pruned;
}
