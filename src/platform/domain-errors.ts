import createError, { type FastifyError } from '@fastify/error';
import { errors, type ApiError } from './errors.js';

/** What a domain error's constructor takes: its message, and the error it stands for. */
type Arguments = [message: string, options?: { cause: unknown }];

/** A domain error with a message of its own: `%s` is the message given. */
const coded = <C extends string>(code: C) => createError<C, Arguments>(code, '%s');

/**
 * The service's own errors, each with a stable code: the one catalogue of what the domain refuses
 * and what stops a process. Thrown as `new LimitsError(message)`; told apart by their code (DOMAIN_CODES).
 */
export const DOMAIN_CODES = {
  /** Limits that do not go with a key's plan, or below an operation's cost; `field`, when set, names the limit (src/api-keys/plans.ts). */
  limits: 'PETSTORE_LIMITS',
  /** An expiry that is no date-time on the calendar, not in the future, or too far in it (src/api-keys/expiry.ts). */
  expiry: 'PETSTORE_EXPIRY',
  /** A change a key's state does not allow: changing or rotating a revoked or rotated key. */
  keyState: 'PETSTORE_KEY_STATE',
  /** The database cannot be reached now (down, restarting, or no connection free in time): worth a retry. */
  databaseUnavailable: 'PETSTORE_DATABASE_UNAVAILABLE',
  /** Another process holds the embedded database's directory. */
  dataDirInUse: 'PETSTORE_DATA_DIR_IN_USE',
  /** A setting of the environment that is missing or wrong (src/platform/config.ts). */
  config: 'PETSTORE_CONFIG',
  /** A port that cannot be had; the message names the setting (src/server.ts). */
  listen: 'PETSTORE_LISTEN',
  /** Bad arguments to the keys command: exit 2, one line on stderr, nothing written. */
  usage: 'PETSTORE_USAGE',
} as const;

export type DomainCode = (typeof DOMAIN_CODES)[keyof typeof DOMAIN_CODES];

export const LimitsError = coded(DOMAIN_CODES.limits);
export const ExpiryError = coded(DOMAIN_CODES.expiry);
export const KeyStateError = coded(DOMAIN_CODES.keyState);
export const DatabaseUnavailableError = createError<typeof DOMAIN_CODES.databaseUnavailable, [options: { cause: unknown }]>(
  DOMAIN_CODES.databaseUnavailable,
  'The database is unreachable',
);
export const DataDirInUseError = coded(DOMAIN_CODES.dataDirInUse);
export const ListenError = coded(DOMAIN_CODES.listen);
export const UsageError = coded(DOMAIN_CODES.usage);

const codeOf = (error: unknown) => (error as { code?: unknown } | null | undefined)?.code;

/** The field of the input a domain error names, when it names one (a LimitsError's `perMinute`). */
export const fieldOf = (error: unknown): string | undefined => (error as { field?: string } | null | undefined)?.field;

/** Whether `error` is the domain error of one of these codes: a check of its code, never of its class. */
export function hasCode<C extends DomainCode>(error: unknown, ...codes: C[]): error is FastifyError & { code: C } {
  return codes.includes(codeOf(error) as C);
}

/** The entry of `table` for the code of `error`; undefined for an error the table does not name. */
export function byCode<T>(table: Partial<Record<DomainCode, T>>, error: unknown): T | undefined {
  const code = codeOf(error);
  return typeof code === 'string' && Object.hasOwn(table, code) ? table[code as DomainCode] : undefined;
}

/** How the API answers a domain error: its API error, and the warning it logs, if any. */
interface ApiAnswer {
  error: (domain: FastifyError) => ApiError;
  warn?: string;
}

/**
 * The one table of the domain errors a request can raise, each as the API error both listeners
 * answer: the refusals of the key rules (shared with the keys command, which gives them as usage
 * errors or refusals) and the database out of reach. The others stop a process before it serves.
 */
const API_ANSWERS: Partial<Record<DomainCode, ApiAnswer>> = {
  [DOMAIN_CODES.limits]: { error: (domain) => errors.badRequest(`body${fieldOf(domain) ? `/${fieldOf(domain)}` : ''} ${domain.message}`) },
  [DOMAIN_CODES.expiry]: { error: ({ message }) => errors.badRequest(`body/expiresAt ${message}`) },
  [DOMAIN_CODES.keyState]: { error: ({ message }) => errors.conflict(message) },
  [DOMAIN_CODES.databaseUnavailable]: {
    error: () => errors.unavailable('The database is unreachable; retry later'),
    warn: 'database unavailable',
  },
};

/** The API's answer to an error of the catalogue; undefined for any other error. */
export function apiAnswerOf(error: FastifyError): { error: ApiError; warn?: string } | undefined {
  const answer = byCode(API_ANSWERS, error);
  return answer && { error: answer.error(error), warn: answer.warn };
}
