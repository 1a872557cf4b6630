import type { ParseArgsOptionsConfig } from 'node:util';
import type { Static, TObject, TSchema } from '@sinclair/typebox';
import { ValueErrorType, type ValueError } from '@sinclair/typebox/errors';
import { Value } from '@sinclair/typebox/value';
import { byCode, DOMAIN_CODES, domainError, fieldOf } from '../../platform/domain-errors.js';
import type { Actor } from '../../audit/repository.js';
import type { AdminTokensRepository } from '../../admin/tokens-repository.js';
import { API_KEY_CODES } from '../../api-keys/errors.js';
import { PLAN_CODES } from '../../plans/errors.js';
import type { ApiKeysRepository } from '../../api-keys/repository.js';
import { expiryOf as checkedExpiry, type KeyRules } from '../../api-keys/rules.js';
import { Id } from '../../platform/schemas/common.js';
import { insideUnion } from '../../platform/validation.js';

/** Bad arguments to the keys command: exit 2, one line on stderr (its message), nothing written. */
export const UsageError = domainError(DOMAIN_CODES.usage, '%s');

/** Where a command's lines go: the terminal, or back over the socket to the command that sent it. */
export interface Output {
  out: (line: string) => void;
  err: (line: string) => void;
}

export interface Repositories {
  keys: ApiKeysRepository;
  rules: KeyRules;
  tokens: AdminTokensRepository;
}

/** A command line that parsed: runs it; its exit code (0, or 1 when refused). */
export type Run = (repositories: Repositories, output: Output) => Promise<number>;

/** The options given, by their name on the command line; a repeated one (a list of strings) as the list of its values. */
export type OptionValues = Record<string, string | boolean | string[] | undefined>;

/** One command of the keys command: its place in the help, its options, and how its arguments become a run. */
export interface KeysCommand {
  /** One word, or two for `admin-token <word>`. */
  name: string;
  synopsis: string;
  options: ParseArgsOptionsConfig;
  /** A UsageError for bad arguments: parsing touches no database. */
  parse: (values: OptionValues, positionals: string[]) => Run;
}

// What JSON.stringify leaves as it is but a terminal acts on: DEL, the C1 controls (0x9b is a CSI, as ESC [
// is) and the bidi embeddings, overrides and isolates, which reorder the rest of the line.
const UNSAFE_FOR_TERMINAL = /[\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** Text with what JSON.stringify leaves but a terminal acts on escaped, written as \u009b is. */
const escapedForTerminal = (text: string) =>
  text.replace(UNSAFE_FOR_TERMINAL, (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`);

/**
 * A word from the command line as a refusal repeats it: quoted as JSON, and every control
 * character escaped, so that an ESC sequence or a newline in what was typed is shown as such and
 * cannot drive the terminal the message reaches.
 */
export const quoted = (word: string) => escapedForTerminal(JSON.stringify(word));

/** Changes made here are recorded as the keys command's: no admin token. */
export const COMMAND: Actor = { name: 'cli:keys', adminTokenId: null };

/** Fields whose option is not their name: `--customer ID`, as the issue and the docs name it; one per item of a repeated option. */
const OPTION_NAMES: Record<string, string> = { customerId: 'customer', allowedOrigins: 'allowed-origin' };

const optionOf = (field: string) => OPTION_NAMES[field] ?? field.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`);

/** A list of strings (or null): given as an option repeated, `--allowed-origin A --allowed-origin B`. */
const isListOfStrings = (schema: TSchema): boolean =>
  (schema.type === 'array' && (schema.items as TSchema).type === 'string') || ((schema.anyOf ?? []) as TSchema[]).some(isListOfStrings);

/** The options of a command that takes what `schema` describes: `--per-minute` for perMinute; booleans: flags; lists of strings repeat. */
export const optionsOf = (schema: TObject): ParseArgsOptionsConfig =>
  Object.fromEntries(
    Object.entries(schema.properties).map(([field, property]) => [
      optionOf(field),
      { type: property.type === 'boolean' ? 'boolean' : 'string', multiple: isListOfStrings(property) },
    ]),
  );

// Only a whole number written plainly is read as one: `007`, `1e3` and `1.5` stay text, which the
// schema refuses, as the admin API refuses them in its parameters.
const INTEGER = /^-?(?:0|[1-9][0-9]*)$/;
const typed = (schema: TSchema, value: string | boolean | string[]) =>
  schema.type === 'integer' && typeof value === 'string' && INTEGER.test(value) ? Number(value) : value;

/** What is wrong, in the schema's own words (its x-error-message, as the admin API answers), after the argument's name. */
function refusal(argument: string, error: ValueError) {
  const rule = (error.schema as { 'x-error-message'?: string })['x-error-message'] ?? error.message.toLowerCase();
  return new UsageError(`${argument} ${error.type === ValueErrorType.ObjectRequiredProperty ? 'is required and ' : ''}${rule}`);
}

/** The options given, checked by the admin API's schema of the same input: a UsageError names the first option that is wrong. */
export function validated<T extends TObject>(schema: T, values: OptionValues): Static<T> {
  const input: Record<string, unknown> = {};
  for (const [field, property] of Object.entries(schema.properties)) {
    const value = values[optionOf(field)];
    if (value !== undefined) input[field] = typed(property, value);
  }
  // What is wrong inside a list or null (one origin of several), as the admin API names it, rather than the union's wording.
  const first = Value.Errors(schema, input).First();
  const error = first && insideUnion(first)[0];
  if (error) throw refusal(`--${optionOf(error.path.split('/')[1]!)}`, error);
  return input;
}

/** One value checked by `schema`, as the admin API checks the field. */
export function checked<T extends TSchema>(argument: string, schema: T, value: string): Static<T> {
  const input = typed(schema, value);
  const error = Value.Errors(schema, input).First();
  if (error) throw refusal(argument, error);
  return input;
}

/** The one id a command acts on, an id as the admin API takes it in a path. */
export function idArgument(command: string, what: 'key' | 'token', positionals: string[]): number {
  if (positionals.length !== 1) throw new UsageError(`${command} takes exactly one ${what} id`);
  return checked(`the ${what} id`, Id, positionals[0]!);
}

export function noArguments(positionals: string[]): void {
  if (positionals.length > 0) throw new UsageError(`unexpected argument ${quoted(positionals[0]!)}`);
}

/** The refusals of the rules shared with the admin API, by their code, as bad arguments say them. */
const USAGE_REFUSALS: Record<string, (message: string, field: string | undefined) => string> = {
  [PLAN_CODES.limits]: (message, field) => (field ? `--${optionOf(field)} ${message}` : message),
  [API_KEY_CODES.expiry]: (message) => `--expires-at ${message}`,
  [API_KEY_CODES.unknownCustomer]: (message) => `--customer ${message}`,
  [API_KEY_CODES.unknownPlan]: (message) => `--plan ${message}`,
  [API_KEY_CODES.origin]: (message) => `--allowed-origin ${message}`,
};

/** A refusal of the rules shared with the admin API as the UsageError of bad arguments; undefined for any other error. */
export function usageRefusalOf(error: unknown): InstanceType<typeof UsageError> | undefined {
  const usage = byCode(USAGE_REFUSALS, error);
  // The rules quote what was typed as JSON (an origin refused): escaped further, as quoted() does.
  return usage && new UsageError(escapedForTerminal(usage((error as Error).message, fieldOf(error))));
}

/**
 * The refusals of the rules shared with the admin API, as bad arguments: an expiry that is no future date, an origin as no
 * browser sends it (those of the plan and limits need the database: see runKeysCommand).
 */
export function sharedRule<T>(work: () => T): T {
  try {
    return work();
  } catch (error) {
    throw usageRefusalOf(error) ?? error;
  }
}

/** `--expires-at` as the admin API takes it (parseExpiry): on the calendar and in the future. */
export const expiryOf = (expiresAt: string | undefined): Date | undefined => sharedRule(() => checkedExpiry(expiresAt, Date.now()));
