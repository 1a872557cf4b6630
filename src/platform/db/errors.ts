import { domainError } from '../domain-errors.js';
import { errors } from '../errors.js';

/** The codes of the database's errors: the one a request can meet, and the one that stops a process before it serves. */
export const DATABASE_CODES = {
  /** The database cannot be reached now (down, restarting, or no connection free in time): worth a retry. */
  unavailable: 'PETSTORE_DATABASE_UNAVAILABLE',
  /** Another process holds the embedded database's directory. */
  dataDirInUse: 'PETSTORE_DATA_DIR_IN_USE',
} as const;

/** Thrown with the error it stands for as its cause, which the API logs as a warning and never answers. */
export const DatabaseUnavailableError = domainError(DATABASE_CODES.unavailable, 'The database is unreachable', {
  error: () => errors.unavailable('The database is unreachable; retry later'),
  warn: 'database unavailable',
});

export const DataDirInUseError = domainError(
  DATABASE_CODES.dataDirInUse,
  'The embedded database in %s is in use by process %s (a running server?). Stop that process first, or use PostgreSQL through DATABASE_URL so that several processes can share it.',
);
