import { domainError, fieldOf, type ApiAnswer } from '../platform/domain-errors.js';
import { errors } from '../platform/errors.js';

/** The codes of the plans' refusals. */
export const PLAN_CODES = {
  /** A name another plan has: it names one plan only. */
  nameTaken: 'PETSTORE_PLAN_NAME_TAKEN',
  /** A change working keys of the plan forbid: its delete, or its limits removed while its keys carry none of their own. */
  inUse: 'PETSTORE_PLAN_IN_USE',
  /**
   * Windows refused for what the schema cannot state (a repeated name, too many after the short
   * form, one below an operation's cost), or missing where a key's plan has none; `field`, when set, names them.
   */
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
/** Thrown with its `field`, the short form's limit that added the window. */
export const TooManyWindowsError = domainError(PLAN_CODES.limits, 'would make %s windows; a list has 5 at most', badWindows);
/** Thrown with its `field`, the limit below the cost. */
export const LimitBelowCostError = domainError(
  PLAN_CODES.limits,
  'is %s, less than the %s units %s costs (RATE_LIMIT_COSTS): a key with it could never call it',
  badWindows,
);
