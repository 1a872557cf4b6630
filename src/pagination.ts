import { errors } from './errors.js';
import { MAX_ID, PET_STATUSES, type PetStatus } from './schemas/pet.js';

/**
 * A keyset cursor: the last id of the previous page and the status filter it was made for,
 * base64url-encoded so clients treat it as opaque.
 */
export function encodeCursor(afterId: number, status: PetStatus | undefined): string {
  return Buffer.from(`${status ?? ''}:${afterId}`).toString('base64url');
}

const CURSOR = new RegExp(`^(${PET_STATUSES.join('|')})?:([1-9][0-9]{0,15})$`);

/** Returns the id to continue after; a cursor that is not ours, or not for this filter, is a 400. */
export function decodeCursor(cursor: string, status: PetStatus | undefined): number {
  const match = CURSOR.exec(Buffer.from(cursor, 'base64url').toString('latin1'));
  const afterId = Number(match?.[2]);
  if (!match || afterId > MAX_ID || Buffer.from(match[0], 'latin1').toString('base64url') !== cursor) {
    throw errors.badRequest('querystring/cursor is not a cursor from a rel="next" link');
  }
  if ((match[1] ?? '') !== (status ?? '')) {
    throw errors.badRequest('querystring/cursor was made for another status filter; keep the filter of the first page');
  }
  return afterId;
}
