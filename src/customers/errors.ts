import { PLAN_CODES } from '../plans/errors.js';
import { domainError, fieldOf } from '../platform/domain-errors.js';
import { errors } from '../platform/errors.js';

/** The codes of the customers' refusals. */
export const CUSTOMER_CODES = {
  /** An externalId another customer has: it names one customer only. */
  externalIdTaken: 'PETSTORE_EXTERNAL_ID_TAKEN',
} as const;

export const ExternalIdTakenError = domainError(CUSTOMER_CODES.externalIdTaken, 'externalId %s is taken by another customer', {
  error: ({ message }) => errors.conflict(message),
});

/** Thrown with its `field`, the short form's limit missing: limits without windows take both. */
export const IncompleteLimitsError = domainError(PLAN_CODES.limits, 'is required: limits without windows take both perMinute and perDay', {
  error: (domain) => errors.badRequest(`body/${fieldOf(domain)} ${domain.message}`),
});
