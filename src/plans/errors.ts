import { domainError, fieldOf, type ApiAnswer } from '../platform/domain-errors.js';
import { errors } from '../platform/errors.js';

/** The codes of the plans' refusals. */
export const PLAN_CODES = {
  /** A name another plan has: it names one plan only. */
  nameTaken: 'PETSTORE_PLAN_NAME_TAKEN',
  /** A change working keys of the plan forbid: its delete, or its limits removed while its keys carry none of their own. */
  inUse: 'PETSTORE_PLAN_IN_USE',
  /** A list of windows the schema cannot refuse: a repeated name (shared with the keys' limits refusals). */
  limits: 'PETSTORE_LIMITS',
} as const;

const conflicting: ApiAnswer = { error: ({ message }) => errors.conflict(message) };
/** A refusal of the windows given, as the body's field it names (`body/limits/1/name`). */
const badWindows: ApiAnswer = {
  error: (domain) => errors.badRequest(`body${fieldOf(domain) ? `/${fieldOf(domain)}` : ''} ${domain.message}`),
};

export const PlanNameTakenError = domainError(PLAN_CODES.nameTaken, 'plan %s exists already', conflicting);

/** The values: the plan, how many working keys have it, what is refused. */
export const PlanInUseError = domainError(PLAN_CODES.inUse, 'plan %s has working keys: %s; %s', conflicting);

/** Thrown with its `field`, the second window of the name (`limits/1/name`). */
export const RepeatedWindowError = domainError(
  PLAN_CODES.limits,
  'repeats the window name %s: each window of a list has a name of its own',
  badWindows,
);
