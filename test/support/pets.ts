import type { Database } from '../../src/platform/db/database.js';

/** How many pets the database holds, or how many of them have the name given. */
export const countPets = async (db: Database, name?: string) =>
  (
    await db.query<{ count: number }>(
      `SELECT count(*)::int AS count FROM pets${name === undefined ? '' : ' WHERE name = $1'}`,
      name === undefined ? [] : [name],
    )
  )[0]!.count;
