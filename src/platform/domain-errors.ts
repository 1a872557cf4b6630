import createError, { type FastifyError } from '@fastify/error';
import type { ApiError } from './errors.js';

/** The values a template's `%s` take, one each, in order. */
type ValuesOf<Template extends string> = Template extends `${string}%s${infer Rest}` ? [string | number, ...ValuesOf<Rest>] : [];

/** What a domain error's constructor takes: its template's values, and the error it stands for. */
type Arguments<Template extends string> = [...values: ValuesOf<Template>, options?: { cause: unknown }];

/** How the API answers a domain error a request can raise: its API error, and the warning it logs, if any. */
export interface ApiAnswer {
  error: (domain: FastifyError) => ApiError;
  warn?: string;
}

/** Where a domain error carries its API answer: on its class's prototype, so platform/ reads it without knowing the feature. */
const API_ANSWER = Symbol('apiAnswer');

/**
 * A domain error: a stable code (`PETSTORE_` and the kind; errors may share one), its message
 * template (`%s` for each value, as util.format fills it), and, when a request can raise it, how the
 * API answers it. Defined in the folder of what raises it; thrown as `new RevokedKeyError(id, instead)`;
 * told apart by its code (hasCode, byCode).
 */
export function domainError<const Code extends string, const Template extends string>(code: Code, template: Template, answer?: ApiAnswer) {
  const Coded = createError<Code, Arguments<Template>>(code, template);
  if (answer) Object.defineProperty(Coded.prototype, API_ANSWER, { value: answer });
  return Coded;
}

/** The codes of the errors no feature folder holds yet; each feature defines its own beside its errors. */
export const DOMAIN_CODES = {
  /** A setting of the environment that is missing or wrong: the errors of src/platform/config/errors.ts. */
  config: 'PETSTORE_CONFIG',
  /** Bad arguments to the keys command: exit 2, one line on stderr, nothing written. */
  usage: 'PETSTORE_USAGE',
} as const;

const codeOf = (error: unknown) => (error as { code?: unknown } | null | undefined)?.code;

/** The field of the input a domain error names, when it names one (a LimitBelowCostError's `perMinute`). */
export const fieldOf = (error: unknown): string | undefined => (error as { field?: string } | null | undefined)?.field;

/** Whether `error` is the domain error of one of these codes: a check of its code, never of its class. */
export function hasCode<C extends string>(error: unknown, ...codes: C[]): error is FastifyError & { code: C } {
  return codes.includes(codeOf(error) as C);
}

/** The entry of `table` for the code of `error`; undefined for an error the table does not name. */
export function byCode<T>(table: Partial<Record<string, T>>, error: unknown): T | undefined {
  const code = codeOf(error);
  return typeof code === 'string' && Object.hasOwn(table, code) ? table[code] : undefined;
}

/** The API's answer to a domain error a request can raise; undefined for any other error. */
export function apiAnswerOf(error: FastifyError): { error: ApiError; warn?: string } | undefined {
  const answer = (error as { [API_ANSWER]?: ApiAnswer })[API_ANSWER];
  return answer && { error: answer.error(error), warn: answer.warn };
}
