import { parseArgs } from 'node:util';
import { createAdminToken } from './admin-token/create.js';
import { listAdminTokens } from './admin-token/list.js';
import { revokeAdminToken } from './admin-token/revoke.js';
import { API_KEY_CODES } from '../../api-keys/errors.js';
import { DOMAIN_CODES, hasCode } from '../../platform/domain-errors.js';
import {
  quoted,
  usageRefusalOf,
  UsageError,
  type KeysCommand,
  type OptionValues,
  type Output,
  type Repositories,
  type Run,
} from './command.js';
import { create } from './create.js';
import { list } from './list.js';
import { revoke } from './revoke.js';
import { rotate } from './rotate.js';

/**
 * The keys command's commands: issue, list, rotate and revoke API keys and admin tokens, through
 * the same repositories as the admin API. Run by the command itself, or, on the embedded
 * database, by the server that holds it (socket.ts), so both answer alike.
 */
const COMMANDS: KeysCommand[] = [create, rotate, list, revoke, createAdminToken, listAdminTokens, revokeAdminToken];

const USAGE = `usage: ${COMMANDS.map((command) => command.synopsis).join(' | ')}`;
const HELP = ['Issue, list, rotate and revoke API keys and admin tokens:', '', ...COMMANDS.map((command) => `  ${command.synopsis}`)].join(
  '\n',
);

// Every command's options are read, so that one given to the wrong command is named as such.
const ALL_OPTIONS = Object.assign({}, ...COMMANDS.map((command) => command.options)) as KeysCommand['options'];

/**
 * parseArgs' refusal, in one line. Its message repeats an unknown option as typed, ESC sequences and
 * newlines included, so that option is named quoted instead (the first unknown one, as parseArgs
 * stops at); its other refusals name only options known here.
 */
function optionsRefusal(error: Error & { code?: string }, args: string[]) {
  if (error.code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return new UsageError(error.message.split('\n')[0]!);
  const { tokens } = parseArgs({ args, options: ALL_OPTIONS, allowPositionals: true, strict: false, tokens: true });
  const unknown = tokens.find((token) => token.kind === 'option' && !Object.hasOwn(ALL_OPTIONS, token.name));
  return new UsageError(`unknown option ${quoted(unknown?.kind === 'option' ? unknown.rawName : '')}`);
}

function parse(argv: string[]): Run {
  // `admin-token <sub-command>` is one command of two words.
  const words = argv[0] === 'admin-token' && argv[1] !== undefined && !argv[1].startsWith('-') ? 2 : 1;
  const name = argv.slice(0, words).join(' ');
  const args = argv.slice(words);
  let parsed;
  try {
    parsed = parseArgs({ args, options: ALL_OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    throw optionsRefusal(error as Error, args);
  }
  if (!name) throw new UsageError('a command is required');
  const command = COMMANDS.find((candidate) => candidate.name === name);
  if (!command) throw new UsageError(`unknown command ${quoted(name)}`);
  const misplaced = Object.keys(parsed.values).find((option) => !Object.hasOwn(command.options, option));
  if (misplaced) throw new UsageError(`--${misplaced} does not apply to '${name}'`);
  return command.parse(parsed.values as OptionValues, parsed.positionals);
}

/**
 * The command line parsed, or the exit code of one answered without a database: the help (0), or
 * bad arguments (2, one line on stderr, nothing written).
 */
export function parseCommandLine(argv: string[], { out, err }: Output): Run | number {
  if (argv.length === 1 && ['help', '--help', '-h'].includes(argv[0]!)) {
    out(HELP);
    return 0;
  }
  try {
    return parse(argv);
  } catch (error) {
    if (!hasCode(error, DOMAIN_CODES.usage)) throw error;
    return badArguments(error, err);
  }
}

function badArguments(error: Error, err: Output['err']): number {
  err(`keys: ${error.message}. ${USAGE}`);
  return 2;
}

/**
 * Runs one command line; its exit code: 0, 1 when refused (no such key, a key whose state forbids
 * it), 2 for bad arguments (also those only the service's settings refuse: limits below an
 * operation's cost, checked where the key is written, nothing written).
 */
export async function runKeysCommand(argv: string[], repositories: Repositories, output: Output): Promise<number> {
  const run = parseCommandLine(argv, output);
  if (typeof run === 'number') return run;
  try {
    return await run(repositories, output);
  } catch (error) {
    const usage = usageRefusalOf(error);
    if (usage) return badArguments(usage, output.err);
    if (!hasCode(error, API_KEY_CODES.keyState)) throw error;
    output.err(`keys: ${error.message}`);
    return 1;
  }
}
