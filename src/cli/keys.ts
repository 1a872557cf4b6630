/**
 * `npm run --silent keys -- <command>` (`keys help` lists them). Scripts depend on this contract:
 * the created key or token is the last line of stdout; bad arguments give one line on stderr and
 * exit 2, having written nothing. On the embedded database a running server holds the data
 * directory, so the command is sent to it; with no server there, it opens the database itself.
 */
import { loadConfig } from '../config/load.js';
import { DOMAIN_CODES, hasCode } from '../platform/domain-errors.js';
import { DATABASE_CODES } from '../platform/db/errors.js';
import { migrate } from '../platform/db/migrate.js';
import { openDatabase } from '../platform/db/open.js';
import { askRunningServer, keysSocketPath } from './keys/socket.js';
import { createAdminTokensRepository } from '../admin/tokens-repository.js';
import { createApiKeysRepository } from '../api-keys/repository.js';
import { createKeyRules } from '../api-keys/rules.js';
import type { Output } from './keys/command.js';
import { parseCommandLine, runKeysCommand } from './keys/commands.js';

const terminal: Output = { out: (line) => console.log(line), err: (line) => console.error(line) };
const argv = process.argv.slice(2);

const parsed = parseCommandLine(argv, terminal);
if (typeof parsed === 'number') process.exit(parsed);

try {
  const config = loadConfig();
  const answer = config.DATABASE_URL ? undefined : await askRunningServer(keysSocketPath(config.DATA_DIR), argv);
  if (answer) {
    for (const [stream, line] of answer.lines) terminal[stream](line);
    process.exitCode = answer.exitCode;
  } else {
    const db = await openDatabase(config, { brief: true });
    try {
      await migrate(db);
      const keys = createApiKeysRepository(db);
      const repositories = { keys, rules: createKeyRules(db, keys, config.rateLimitCosts), tokens: createAdminTokensRepository(db) };
      process.exitCode = await runKeysCommand(argv, repositories, terminal);
    } finally {
      await db.close();
    }
  }
} catch (error) {
  const expected = hasCode(error, DOMAIN_CODES.config, DATABASE_CODES.dataDirInUse);
  console.error(`keys: ${expected ? error.message : `failed: ${(error as Error).message}`}`);
  process.exitCode = 1;
}
