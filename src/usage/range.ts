import { dateTimeOf } from '../api-keys/expiry.js';
import { errors } from '../platform/errors.js';
import { DAY_MS, HOUR_MS } from '../platform/time.js';
import type { Granularity } from './repository.js';

/** The longest range each granularity answers: a year of hours (8,784 buckets at most), ten years of days. */
const MAX_RANGE_DAYS: Record<Granularity, number> = { hour: 366, day: 3_660 };

/** A bound of a range, checked: on the calendar, and a whole bucket of the granularity; `field` named as its error names it. */
export function boundOf(field: string, text: string, granularity: Granularity): Date {
  const date = dateTimeOf(text);
  if (!date) throw errors.badRequest(`${field} is no date and time on the calendar`);
  // PGlite is sent a bound as toISOString writes it, which it reads only for years 0001 to 9999 (else a 500).
  if (date.getUTCFullYear() < 1 || date.getUTCFullYear() > 9999)
    throw errors.badRequest(`${field} must lie in the years 0001 to 9999 (UTC)`);
  if (date.getTime() % (granularity === 'day' ? DAY_MS : HOUR_MS) !== 0) {
    throw errors.badRequest(
      `${field} must be ${granularity === 'day' ? '00:00 UTC of a day, with granularity=day' : 'a whole hour (UTC)'}, as the buckets are`,
    );
  }
  return date;
}

/**
 * A read's range of the usage record (the admin API's, a key's own), checked: start before end, and
 * no longer than its granularity answers; a 400 naming the field otherwise.
 */
export function rangeOf(query: { start: string; end: string }, granularity: Granularity) {
  const start = boundOf('querystring/start', query.start, granularity);
  const end = boundOf('querystring/end', query.end, granularity);
  if (start >= end) throw errors.badRequest('querystring/start must be before end');
  const most = MAX_RANGE_DAYS[granularity];
  if (end.getTime() - start.getTime() > most * DAY_MS) {
    throw errors.badRequest(
      `querystring/end: the range from start to end is more than ${most} days, the most granularity=${granularity} answers` +
        (granularity === 'hour' ? '; ask granularity=day, or a shorter range' : '; ask a shorter range'),
    );
  }
  return { start, end };
}
