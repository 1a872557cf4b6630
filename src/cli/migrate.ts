import { loadConfig } from '../config/load.js';
import { DOMAIN_CODES, hasCode } from '../platform/domain-errors.js';
import { openDatabase } from '../platform/db/open.js';
import { migrate } from '../platform/db/migrate.js';

/** `npm run migrate`: the one-shot migration step to run before a rollout. */
try {
  const db = await openDatabase(loadConfig(), { brief: true });
  try {
    const applied = await migrate(db);
    console.log(applied.length ? `applied: ${applied.join(', ')}` : 'up to date');
  } finally {
    await db.close();
  }
} catch (error) {
  console.error(hasCode(error, DOMAIN_CODES.config) ? error.message : `migration failed: ${(error as Error).message}`);
  process.exitCode = 1;
}
