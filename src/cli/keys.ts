import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from '../config.js';
import { DataDirInUseError } from '../db/database.js';
import { openDatabase } from '../db/open.js';
import { ExpiryError, parseExpiry } from '../expiry.js';
import { migrate } from '../db/migrate.js';
import { isPlan, LimitsError, ownLimits, PLANS } from '../plans.js';
import type { Actor } from '../repositories/admin-audit.js';
import {
  ADMIN_SCOPES,
  createAdminTokensRepository,
  isAdminScope,
  type AdminScope,
  type AdminTokensRepository,
} from '../repositories/admin-tokens.js';
import {
  createApiKeysRepository,
  type ApiKeysRepository,
  DEFAULT_OVERLAP_SECONDS,
  KeyStateError,
  MAX_OVERLAP_SECONDS,
  type NewApiKey,
} from '../repositories/api-keys.js';

/**
 * `npm run --silent keys -- <command>`: issue, list and revoke API keys and admin tokens, through
 * the same repositories as the admin API. Scripts depend on this contract: the created key or
 * token is the last line of stdout; bad arguments give one line on stderr and exit 2, having
 * written nothing. Every change is in the audit trail, as made by the keys command.
 */
const USAGE =
  'usage: keys create --plan <free|pro|business|enterprise> [--name TEXT] [--per-minute N] [--per-day N] [--expires-at ISO-8601] [--read-only]' +
  ' | keys rotate <id> [--overlap-seconds N] [--expires-at ISO-8601] | keys list [--json] | keys revoke <id>' +
  ' | keys admin-token create --scope <read|write> --name TEXT | keys admin-token list [--json] | keys admin-token revoke <id>';

/** Changes made here are recorded as the keys command's: no admin token. */
const COMMAND: Actor = { name: 'cli:keys', adminTokenId: null };

class UsageError extends Error {}

type Command =
  | { name: 'create'; key: NewApiKey }
  | { name: 'list'; json: boolean }
  | { name: 'revoke'; id: number }
  | { name: 'rotate'; id: number; overlapSeconds: number; expiresAt?: Date }
  | { name: 'admin-token create'; scope: AdminScope; tokenName: string }
  | { name: 'admin-token list'; json: boolean }
  | { name: 'admin-token revoke'; id: number };

const INT32 = /^[1-9][0-9]{0,9}$/;
function positiveInteger(option: string, value: string, max = 2_147_483_647): number {
  if (!INT32.test(value) || Number(value) > max) throw new UsageError(`${option} must be a whole number from 1 to ${max}`);
  return Number(value);
}

/** An expiry as the admin API takes it (parseExpiry): an ISO 8601 date-time with a time zone, on the calendar, in the future. */
function futureDate(value: string): Date {
  try {
    return parseExpiry(value, Date.now());
  } catch (error) {
    if (!(error instanceof ExpiryError)) throw error;
    throw new UsageError(`--expires-at ${error.message}`);
  }
}

function validName(option: string, value: string): string {
  if (value.length > 200 || /\p{Cc}/u.test(value))
    throw new UsageError(`${option} must be at most 200 characters, without control characters`);
  return value;
}

function parse(argv: string[]): Command {
  // `admin-token <sub-command>` is one command of two words.
  const words = argv[0] === 'admin-token' && argv[1] !== undefined && !argv[1].startsWith('-') ? 2 : 1;
  const commandName = argv.slice(0, words).join(' ');
  const rest = argv.slice(words);
  const options = {
    plan: { type: 'string' },
    name: { type: 'string' },
    'per-minute': { type: 'string' },
    'per-day': { type: 'string' },
    json: { type: 'boolean' },
    'expires-at': { type: 'string' },
    'read-only': { type: 'boolean' },
    'overlap-seconds': { type: 'string' },
    scope: { type: 'string' },
  } as const;
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message.split('\n')[0]);
  }
  const { values, positionals } = parsed;
  const allowed: Record<Command['name'], string[]> = {
    create: ['plan', 'name', 'per-minute', 'per-day', 'expires-at', 'read-only'],
    list: ['json'],
    revoke: [],
    rotate: ['overlap-seconds', 'expires-at'],
    'admin-token create': ['scope', 'name'],
    'admin-token list': ['json'],
    'admin-token revoke': [],
  };
  if (!commandName) throw new UsageError('a command is required');
  if (!Object.hasOwn(allowed, commandName)) throw new UsageError(`unknown command '${commandName}'`);
  const name = commandName as Command['name'];
  const misplaced = Object.keys(values).find((option) => !allowed[name].includes(option));
  if (misplaced) throw new UsageError(`--${misplaced} does not apply to '${name}'`);

  const expiresAt = values['expires-at'] === undefined ? undefined : futureDate(values['expires-at']);
  if (name === 'revoke' || name === 'rotate' || name === 'admin-token revoke') {
    const what = name === 'admin-token revoke' ? 'token' : 'key';
    if (positionals.length !== 1) throw new UsageError(`${name} takes exactly one ${what} id`);
    const id = positiveInteger(`the ${what} id`, positionals[0]!, Number.MAX_SAFE_INTEGER);
    if (name !== 'rotate') return { name, id };
    const overlap = values['overlap-seconds'];
    const overlapSeconds =
      overlap === undefined
        ? DEFAULT_OVERLAP_SECONDS
        : overlap === '0'
          ? 0
          : positiveInteger('--overlap-seconds', overlap, MAX_OVERLAP_SECONDS);
    return { name, id, overlapSeconds, expiresAt };
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  if (name === 'list' || name === 'admin-token list') return { name, json: values.json ?? false };
  if (name === 'admin-token create') {
    const scope = values.scope;
    if (scope === undefined || !isAdminScope(scope)) throw new UsageError(`--scope must be one of ${ADMIN_SCOPES.join(', ')}`);
    if (!values.name) throw new UsageError('--name is required: who or what holds the token');
    return { name, scope, tokenName: validName('--name', values.name) };
  }

  const plan = values.plan;
  if (plan === undefined) throw new UsageError(`--plan is required (${PLANS.join(', ')})`);
  if (!isPlan(plan)) throw new UsageError(`--plan must be one of ${PLANS.join(', ')}`);
  const keyName = validName('--name', values.name ?? '');
  const perMinute = values['per-minute'] === undefined ? undefined : positiveInteger('--per-minute', values['per-minute']);
  const perDay = values['per-day'] === undefined ? undefined : positiveInteger('--per-day', values['per-day']);
  let limits;
  try {
    limits = ownLimits(plan, perMinute, perDay);
  } catch (error) {
    if (!(error instanceof LimitsError)) throw error;
    throw new UsageError(error.message);
  }
  return { name, key: { plan, name: keyName, limits, expiresAt, readOnly: values['read-only'] ?? false } };
}

async function execute(command: Command, { keys, tokens }: { keys: ApiKeysRepository; tokens: AdminTokensRepository }): Promise<number> {
  switch (command.name) {
    case 'create': {
      const { id, key } = await keys.create(command.key, { actor: COMMAND });
      console.log(`Created API key ${id} (${command.key.plan}). It is shown only this once; store it now:`);
      console.log(key);
      return 0;
    }
    case 'list': {
      const records = await keys.list();
      if (command.json) console.log(JSON.stringify(records, null, 2));
      for (const key of command.json ? [] : records) {
        // A rotated key in its overlap is active, and says what replaced it.
        const expired = key.expiresAt !== null && Date.parse(key.expiresAt) <= Date.now();
        const state = key.revokedAt ? `revoked ${key.revokedAt}` : expired ? 'expired' : 'active';
        console.log(
          [
            key.id,
            key.name || '-',
            key.plan,
            `${key.perMinute}/minute`,
            `${key.perDay}/day`,
            key.readOnly ? 'read-only' : 'read-write',
            key.createdAt,
            key.expiresAt ? `expires ${key.expiresAt}` : 'no expiry',
            key.replacedBy === null ? state : `${state}, replaced by ${key.replacedBy}`,
          ].join('\t'),
        );
      }
      return 0;
    }
    case 'rotate': {
      const rotated = await keys.rotate(command.id, command.overlapSeconds, { expiresAt: command.expiresAt, actor: COMMAND });
      if (!rotated) {
        console.error(`keys: no API key with id ${command.id}`);
        return 1;
      }
      const until = command.overlapSeconds === 0 ? 'it was revoked at once' : `it keeps working for ${command.overlapSeconds} s`;
      console.log(
        `Rotated API key ${command.id} into key ${rotated.id} (same plan, limits, name, scope and quota); ${until}. The new key is shown only this once:`,
      );
      console.log(rotated.key);
      return 0;
    }
    case 'revoke': {
      if (!(await keys.revoke(command.id, { actor: COMMAND }))) {
        console.error(`keys: no API key with id ${command.id}`);
        return 1;
      }
      console.log(`Revoked API key ${command.id}; it stops working on every instance within a second.`);
      return 0;
    }
    case 'admin-token create': {
      const { id, token } = await tokens.create({ name: command.tokenName, scope: command.scope }, COMMAND);
      console.log(`Created admin token ${id} (${command.scope}). It is shown only this once; store it now:`);
      console.log(token);
      return 0;
    }
    case 'admin-token list': {
      const records = await tokens.list();
      if (command.json) console.log(JSON.stringify(records, null, 2));
      for (const token of command.json ? [] : records) {
        console.log(
          [token.id, token.name, token.scope, token.createdAt, token.revokedAt ? `revoked ${token.revokedAt}` : 'active'].join('\t'),
        );
      }
      return 0;
    }
    case 'admin-token revoke': {
      if (!(await tokens.revoke(command.id, COMMAND))) {
        console.error(`keys: no admin token with id ${command.id}`);
        return 1;
      }
      console.log(`Revoked admin token ${command.id}; the admin API refuses it from now on.`);
      return 0;
    }
  }
}

let command: Command;
try {
  command = parse(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  console.error(`keys: ${error.message}. ${USAGE}`);
  process.exit(2);
}

try {
  const db = await openDatabase(loadConfig());
  try {
    await migrate(db);
    process.exitCode = await execute(command, { keys: createApiKeysRepository(db), tokens: createAdminTokensRepository(db) });
  } finally {
    await db.close();
  }
} catch (error) {
  const expected = error instanceof ConfigError || error instanceof DataDirInUseError || error instanceof KeyStateError;
  console.error(`keys: ${expected ? error.message : `failed: ${(error as Error).message}`}`);
  process.exitCode = 1;
}
