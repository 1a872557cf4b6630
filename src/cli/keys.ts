import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from '../config.js';
import { DataDirInUseError } from '../db/database.js';
import { openDatabase } from '../db/open.js';
import { migrate } from '../db/migrate.js';
import { isPlan, PLANS, type Limits } from '../plans.js';
import { createApiKeysRepository, RotationError, type ApiKeysRepository, type NewApiKey } from '../repositories/api-keys.js';

/**
 * `npm run --silent keys -- <command>`: issue, list and revoke API keys. Scripts depend on this
 * contract: the created key is the last line of stdout; bad arguments give one line on stderr
 * and exit 2, having written nothing.
 */
const USAGE =
  'usage: keys create --plan <free|pro|business|enterprise> [--name TEXT] [--per-minute N] [--per-day N] [--expires-at ISO-8601] [--read-only]' +
  ' | keys rotate <id> [--overlap-seconds N] [--expires-at ISO-8601] | keys list [--json] | keys revoke <id>';

class UsageError extends Error {}

type Command =
  | { name: 'create'; key: NewApiKey }
  | { name: 'list'; json: boolean }
  | { name: 'revoke'; id: number }
  | { name: 'rotate'; id: number; overlapSeconds: number; expiresAt?: Date };

/** How long a rotated key keeps working by default: a day to roll the new one out. */
const DEFAULT_OVERLAP_SECONDS = 86_400;

const INT32 = /^[1-9][0-9]{0,9}$/;
function positiveInteger(option: string, value: string, max = 2_147_483_647): number {
  if (!INT32.test(value) || Number(value) > max) throw new UsageError(`${option} must be a whole number from 1 to ${max}`);
  return Number(value);
}

/** An ISO 8601 date-time with a time zone, in the future. */
function futureDate(value: string): Date {
  const date = new Date(value);
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(value) || Number.isNaN(date.getTime())) {
    throw new UsageError('--expires-at must be an ISO 8601 date-time with a time zone, such as 2027-01-31T00:00:00Z');
  }
  if (date.getTime() <= Date.now()) throw new UsageError('--expires-at must be in the future');
  return date;
}

function parse(argv: string[]): Command {
  const [commandName, ...rest] = argv;
  const options = {
    plan: { type: 'string' },
    name: { type: 'string' },
    'per-minute': { type: 'string' },
    'per-day': { type: 'string' },
    json: { type: 'boolean' },
    'expires-at': { type: 'string' },
    'read-only': { type: 'boolean' },
    'overlap-seconds': { type: 'string' },
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
  };
  if (!commandName) throw new UsageError('a command is required');
  if (!Object.hasOwn(allowed, commandName)) throw new UsageError(`unknown command '${commandName}'`);
  const name = commandName as Command['name'];
  const misplaced = Object.keys(values).find((option) => !allowed[name].includes(option));
  if (misplaced) throw new UsageError(`--${misplaced} does not apply to '${name}'`);

  const expiresAt = values['expires-at'] === undefined ? undefined : futureDate(values['expires-at']);
  if (name === 'revoke' || name === 'rotate') {
    if (positionals.length !== 1) throw new UsageError(`${name} takes exactly one key id`);
    const id = positiveInteger('the key id', positionals[0]!, Number.MAX_SAFE_INTEGER);
    if (name === 'revoke') return { name, id };
    const overlap = values['overlap-seconds'];
    const overlapSeconds =
      overlap === undefined ? DEFAULT_OVERLAP_SECONDS : overlap === '0' ? 0 : positiveInteger('--overlap-seconds', overlap);
    return { name, id, overlapSeconds, expiresAt };
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  if (name === 'list') return { name, json: values.json ?? false };

  const plan = values.plan;
  if (plan === undefined) throw new UsageError(`--plan is required (${PLANS.join(', ')})`);
  if (!isPlan(plan)) throw new UsageError(`--plan must be one of ${PLANS.join(', ')}`);
  const keyName = values.name ?? '';
  if (keyName.length > 200 || /\p{Cc}/u.test(keyName))
    throw new UsageError('--name must be at most 200 characters, without control characters');
  const perMinute = values['per-minute'];
  const perDay = values['per-day'];
  const lifecycle = { expiresAt, readOnly: values['read-only'] ?? false };
  if (plan !== 'enterprise') {
    if (perMinute !== undefined || perDay !== undefined) {
      throw new UsageError(`--per-minute and --per-day are for enterprise keys; the ${plan} plan has fixed limits`);
    }
    return { name, key: { plan, name: keyName, ...lifecycle } };
  }
  if (perMinute === undefined || perDay === undefined) throw new UsageError('enterprise keys need --per-minute and --per-day');
  const limits: Limits = { perMinute: positiveInteger('--per-minute', perMinute), perDay: positiveInteger('--per-day', perDay) };
  return { name, key: { plan, name: keyName, limits, ...lifecycle } };
}

async function execute(command: Command, keys: ApiKeysRepository): Promise<number> {
  switch (command.name) {
    case 'create': {
      const { id, key } = await keys.create(command.key);
      console.log(`Created API key ${id} (${command.key.plan}). It is shown only this once; store it now:`);
      console.log(key);
      return 0;
    }
    case 'list': {
      const records = await keys.list();
      if (command.json) console.log(JSON.stringify(records, null, 2));
      for (const key of command.json ? [] : records) {
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
      const rotated = await keys.rotate(command.id, command.overlapSeconds, command.expiresAt);
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
      if (!(await keys.revoke(command.id))) {
        console.error(`keys: no API key with id ${command.id}`);
        return 1;
      }
      console.log(`Revoked API key ${command.id}; it stops working on every instance within a second.`);
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
    process.exitCode = await execute(command, createApiKeysRepository(db));
  } finally {
    await db.close();
  }
} catch (error) {
  const expected = error instanceof ConfigError || error instanceof DataDirInUseError || error instanceof RotationError;
  console.error(`keys: ${expected ? error.message : `failed: ${(error as Error).message}`}`);
  process.exitCode = 1;
}
