import { domainError, type ApiAnswer } from '../platform/domain-errors.js';
import { errors } from '../platform/errors.js';

/** The codes of the credits' refusals. */
export const CREDITS_CODES = {
  /** A decrement of credits there are none of: nothing to take from (set or increment them first). */
  noCredits: 'PETSTORE_NO_CREDITS',
  /** An increment past MAX_BALANCE (repository.ts). */
  balanceLimit: 'PETSTORE_CREDITS_LIMIT',
} as const;

const conflict: ApiAnswer = { error: ({ message }) => errors.conflict(message) };

/** The owner named as the message says it: "customer 7", "API key 12". */
export const NoCreditsError = domainError(CREDITS_CODES.noCredits, '%s has no credits to decrement; set or increment them first', conflict);
export const BalanceLimitError = domainError(
  CREDITS_CODES.balanceLimit,
  'the increment would take the balance of %s past %s units; set it instead',
  conflict,
);
