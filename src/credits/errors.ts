import { domainError, type ApiAnswer } from '../platform/domain-errors.js';
import { errors } from '../platform/errors.js';

/** The codes of the credits' refusals. */
export const CREDITS_CODES = {
  /** A decrement of credits there are none of: nothing to take from (set or increment them first). */
  noCredits: 'PETSTORE_NO_CREDITS',
  /** An increment past MAX_BALANCE (repository.ts). */
  balanceLimit: 'PETSTORE_CREDITS_LIMIT',
  /** An increment or decrement of nothing. */
  amount: 'PETSTORE_CREDITS_AMOUNT',
} as const;

const conflict: ApiAnswer = { error: ({ message }) => errors.conflict(message) };

/** The owner named as the message says it: "customer 7", "API key 12". */
export const NoCreditsError = domainError(CREDITS_CODES.noCredits, '%s has no credits to decrement; set or increment them first', conflict);
export const BalanceLimitError = domainError(
  CREDITS_CODES.balanceLimit,
  'the increment would take the balance of %s past %s units; set it instead',
  conflict,
);
/** An increment or decrement of less than 1 (a set may be 0: the schema alone cannot say so). */
export const AmountTooSmallError = domainError(CREDITS_CODES.amount, 'must be a whole number from 1 to %s for %s', {
  error: ({ message }) => errors.badRequest(`body/amount ${message}`),
});
