import { domainError, fieldOf, type ApiAnswer } from '../platform/domain-errors.js';
import { errors } from '../platform/errors.js';
import { PLAN_CODES } from '../plans/errors.js';

/** The codes of the key rules' refusals: the admin API answers them, the keys command gives them as usage errors or refusals. */
export const API_KEY_CODES = {
  /** An expiry that is no date-time on the calendar, not in the future, or too far in it (expiry.ts). */
  expiry: 'PETSTORE_EXPIRY',
  /** A change a key's state does not allow: changing or rotating a revoked or rotated key (rules.ts). */
  keyState: 'PETSTORE_KEY_STATE',
  /** A customerId that names no customer (repository.ts). */
  unknownCustomer: 'PETSTORE_UNKNOWN_CUSTOMER',
  /** A plan that is not in the plans table (rules.ts). */
  unknownPlan: 'PETSTORE_UNKNOWN_PLAN',
  /** An allowed origin not written as browsers send it, or listed twice (origins.ts). */
  origin: 'PETSTORE_ORIGIN',
} as const;

/** A refusal of the limits given, as the body's field it names, when it names one. */
const badLimits: ApiAnswer = {
  error: (domain) => errors.badRequest(`body${fieldOf(domain) ? `/${fieldOf(domain)}` : ''} ${domain.message}`),
};
const badExpiry: ApiAnswer = { error: ({ message }) => errors.badRequest(`body/expiresAt ${message}`) };
const unknownCustomer: ApiAnswer = { error: ({ message }) => errors.badRequest(`body/customerId ${message}`) };
const unknownPlan: ApiAnswer = { error: ({ message }) => errors.badRequest(`body/plan ${message}`) };
/** A refusal of an allowed origin, as the body's field it names (`body/allowedOrigins/1`). */
const badOrigin: ApiAnswer = { error: (domain) => errors.badRequest(`body/${fieldOf(domain)} ${domain.message}`) };
const conflictingState: ApiAnswer = { error: ({ message }) => errors.conflict(message) };

export const MissingLimitsError = domainError(
  PLAN_CODES.limits,
  'the %s plan has no limits of its own: a key of it needs limits (or perMinute and perDay)',
  badLimits,
);

export const ExpiryFormatError = domainError(
  API_KEY_CODES.expiry,
  'must be an ISO 8601 date-time with a time zone, such as 2027-01-31T00:00:00Z',
  badExpiry,
);
export const ExpiryNotOnCalendarError = domainError(API_KEY_CODES.expiry, 'must be a date and time on the calendar; %s is not', badExpiry);
export const ExpiryPastError = domainError(API_KEY_CODES.expiry, 'must be in the future', badExpiry);
export const ExpiryTooLateError = domainError(API_KEY_CODES.expiry, 'must be no later than %s', badExpiry);

/** The last value says what to do instead: it differs between a rotation and a change. */
export const RevokedKeyError = domainError(API_KEY_CODES.keyState, 'API key %s is revoked; %s', conflictingState);
export const RotatedKeyError = domainError(API_KEY_CODES.keyState, 'API key %s was rotated into key %s; %s', conflictingState);

export const UnknownCustomerError = domainError(API_KEY_CODES.unknownCustomer, 'is %s, which names no customer', unknownCustomer);
/** The API's and the keys command's refusal of a plan not in the plans table. */
export const UnknownPlanError = domainError(API_KEY_CODES.unknownPlan, 'is %s, which names no plan', unknownPlan);

/** Thrown with its `field`, the origin's place in the list (`allowedOrigins/0`); the value is originProblem's account. */
export const OriginFormError = domainError(API_KEY_CODES.origin, '%s', badOrigin);
/** Thrown with its `field`, the second place of the origin; the value is the origin, quoted. */
export const RepeatedOriginError = domainError(API_KEY_CODES.origin, 'repeats %s: each origin is listed once', badOrigin);
