import { parseArgs } from 'node:util';
import { DEFAULT_OVERLAP_SECONDS, MAX_OVERLAP_SECONDS } from '../api-key-lifecycle.js';
import { ExpiryError, parseExpiry } from '../expiry.js';
import { isPlan, LimitsError, ownLimits, PLANS } from '../plans.js';
import type { Actor } from '../repositories/admin-audit.js';
import { ADMIN_SCOPES, isAdminScope, type AdminScope, type AdminTokensRepository } from '../repositories/admin-tokens.js';
import { type ApiKeysRepository, KeyStateError, type NewApiKey } from '../repositories/api-keys.js';

/**
 * The keys command's commands: issue, list, rotate and revoke API keys and admin tokens, through
 * the same repositories as the admin API. Run by the command itself, or, on the embedded
 * database, by the server that holds it (keys-socket.ts), so both answer alike.
 */
const SYNOPSES = [
  'keys create --plan <free|pro|business|enterprise> [--name TEXT] [--per-minute N] [--per-day N] [--expires-at ISO-8601] [--read-only]',
  'keys rotate <id> [--overlap-seconds N] [--expires-at ISO-8601]',
  'keys list [--json]',
  'keys revoke <id>',
  'keys admin-token create --scope <read|write> --name TEXT',
  'keys admin-token list [--json]',
  'keys admin-token revoke <id>',
];
const USAGE = `usage: ${SYNOPSES.join(' | ')}`;
const HELP = ['Issue, list, rotate and revoke API keys and admin tokens:', '', ...SYNOPSES.map((synopsis) => `  ${synopsis}`)].join('\n');

/** Changes made here are recorded as the keys command's: no admin token. */
const COMMAND: Actor = { name: 'cli:keys', adminTokenId: null };

class UsageError extends Error {}

/** Where a command's lines go: the terminal, or back over the socket to the command that sent it. */
export interface Output {
  out: (line: string) => void;
  err: (line: string) => void;
}

export interface Repositories {
  keys: ApiKeysRepository;
  tokens: AdminTokensRepository;
}

export type Command =
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

async function execute(command: Command, { keys, tokens }: Repositories, { out, err }: Output): Promise<number> {
  switch (command.name) {
    case 'create': {
      const { id, key } = await keys.create(command.key, { actor: COMMAND });
      out(`Created API key ${id} (${command.key.plan}). It is shown only this once; store it now:`);
      out(key);
      return 0;
    }
    case 'list': {
      const records = await keys.list();
      if (command.json) out(JSON.stringify(records, null, 2));
      for (const key of command.json ? [] : records) {
        // A rotated key in its overlap is active, and says what replaced it.
        const expired = key.expiresAt !== null && Date.parse(key.expiresAt) <= Date.now();
        const state = key.revokedAt ? `revoked ${key.revokedAt}` : expired ? 'expired' : 'active';
        out(
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
        err(`keys: no API key with id ${command.id}`);
        return 1;
      }
      const until = command.overlapSeconds === 0 ? 'it was revoked at once' : `it keeps working for ${command.overlapSeconds} s`;
      out(
        `Rotated API key ${command.id} into key ${rotated.id} (same plan, limits, name, scope and quota); ${until}. The new key is shown only this once:`,
      );
      out(rotated.key);
      return 0;
    }
    case 'revoke': {
      if (!(await keys.revoke(command.id, { actor: COMMAND }))) {
        err(`keys: no API key with id ${command.id}`);
        return 1;
      }
      out(`Revoked API key ${command.id}; it stops working on every instance within a second.`);
      return 0;
    }
    case 'admin-token create': {
      const { id, token } = await tokens.create({ name: command.tokenName, scope: command.scope }, COMMAND);
      out(`Created admin token ${id} (${command.scope}). It is shown only this once; store it now:`);
      out(token);
      return 0;
    }
    case 'admin-token list': {
      const records = await tokens.list();
      if (command.json) out(JSON.stringify(records, null, 2));
      for (const token of command.json ? [] : records) {
        out([token.id, token.name, token.scope, token.createdAt, token.revokedAt ? `revoked ${token.revokedAt}` : 'active'].join('\t'));
      }
      return 0;
    }
    case 'admin-token revoke': {
      if (!(await tokens.revoke(command.id, COMMAND))) {
        err(`keys: no admin token with id ${command.id}`);
        return 1;
      }
      out(`Revoked admin token ${command.id}; the admin API refuses it from now on.`);
      return 0;
    }
  }
}

/**
 * The command line parsed, or the exit code of one answered without a database: the help (0), or
 * bad arguments (2, one line on stderr, nothing written).
 */
export function parseCommandLine(argv: string[], { out, err }: Output): Command | number {
  if (argv.length === 1 && ['help', '--help', '-h'].includes(argv[0]!)) {
    out(HELP);
    return 0;
  }
  try {
    return parse(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    err(`keys: ${error.message}. ${USAGE}`);
    return 2;
  }
}

/** Runs one command line; its exit code: 0, 1 when refused (no such key, a key whose state forbids it), 2 for bad arguments. */
export async function runKeysCommand(argv: string[], repositories: Repositories, output: Output): Promise<number> {
  const command = parseCommandLine(argv, output);
  if (typeof command === 'number') return command;
  try {
    return await execute(command, repositories, output);
  } catch (error) {
    if (!(error instanceof KeyStateError)) throw error;
    output.err(`keys: ${error.message}`);
    return 1;
  }
}
