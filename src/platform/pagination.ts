import { createHash } from 'node:crypto';
import { errors } from './errors.js';
import { MAX_ID } from './schemas/common.js';

/**
 * A keyset cursor: the last id of the previous page and the filter it was made for (a status of
 * pets, a digest of the admin listing's filters), base64url-encoded so clients treat it as opaque.
 */
export function encodeCursor(afterId: number, filter: string | undefined): string {
  return Buffer.from(`${filter ?? ''}:${afterId}`).toString('base64url');
}

const CURSOR = /^([0-9A-Za-z_-]*):([1-9][0-9]{0,15})$/;

/**
 * Returns the id to continue after; a cursor that is not ours, or not for this filter, is a 400
 * (`filterName` names the filter for the client: keep it as on the first page).
 */
export function decodeCursor(cursor: string, filter: string | undefined, filterName = 'status filter'): number {
  const match = CURSOR.exec(Buffer.from(cursor, 'base64url').toString('latin1'));
  const afterId = Number(match?.[2]);
  if (!match || afterId > MAX_ID || Buffer.from(match[0], 'latin1').toString('base64url') !== cursor) {
    throw errors.badRequest('querystring/cursor is not a cursor from a rel="next" link');
  }
  if (match[1] !== (filter ?? '')) {
    throw errors.badRequest(`querystring/cursor was made for another ${filterName}; keep the ${filterName} of the first page`);
  }
  return afterId;
}

/** A listing's filters as a cursor carries them: a short digest (a filter may be a long name), the same for the same values. */
export const filterDigest = (values: readonly unknown[]): string =>
  createHash('sha256').update(JSON.stringify(values)).digest('base64url').slice(0, 12);

/** The RFC 8288 Link to the next page: `url` with `query` (undefined values left out). */
export function nextLink(url: string, query: Record<string, string | number | undefined>): string {
  // Built by hand: a list page sends this on every request, and URLSearchParams is slower at it.
  let search = '';
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined) search += `${search ? '&' : '?'}${name}=${encodeURIComponent(value)}`;
  }
  return `<${url}${search}>; rel="next"`;
}
