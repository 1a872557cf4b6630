import Postgrator from 'postgrator';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Database } from './database.js';

const MIGRATIONS_DIR = fileURLToPath(new URL('../../../migrations', import.meta.url));
const MIGRATIONS = join(MIGRATIONS_DIR, '*.sql');
// Any constant works; it only has to be the same for every instance of this service.
const MIGRATION_LOCK = 7_310_042_015;

/**
 * Applies pending migrations/ files. All of them run in one transaction that first takes an
 * advisory lock, so instances starting together serialise, each file is recorded atomically
 * with its effect, and a failure leaves the schema as it was.
 */
export async function migrate(db: Database): Promise<string[]> {
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    const postgrator = new Postgrator({
      migrationPattern: MIGRATIONS,
      driver: 'pg',
      schemaTable: 'schema_migrations',
      currentSchema: 'public',
      execQuery: async (sql) => ({ rows: await tx.query(sql) }),
      execSqlScript: (sql) => tx.runScript(sql),
    });
    const applied = await postgrator.migrate();
    return applied.map((migration) => `${migration.version} ${migration.name}`);
  });
}

/** Names the schema the migrations make: a digest of every file's name and contents. */
export function migrationsDigest(): string {
  const hash = createHash('sha256');
  for (const file of readdirSync(MIGRATIONS_DIR)
    .filter((name) => name.endsWith('.sql'))
    .sort()) {
    hash
      .update(file)
      .update('\0')
      .update(readFileSync(join(MIGRATIONS_DIR, file)))
      .update('\0');
  }
  return hash.digest('hex').slice(0, 12);
}
