import { ExpiryFormatError, ExpiryNotOnCalendarError, ExpiryPastError, ExpiryTooLateError } from './errors.js';

/** An ISO 8601 date-time with a time zone, its fields captured: the one shape an expiry takes. */
export const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})$/;

/**
 * The latest expiry: past year 9999 a date is written `+010000-...` (toISOString), which is no
 * RFC 3339 date-time, so the admin API could not serve the key it stored.
 */
export const LATEST_EXPIRY = '9999-12-31T23:59:59Z';

/**
 * The instant a date-time names: undefined unless it has the shape of DATE_TIME and names a date and
 * time on the calendar (Date would roll 2099-02-31 over into March, and 24:00 into the next day).
 */
export function dateTimeOf(text: string): Date | undefined {
  const fields = DATE_TIME.exec(text)
    ?.slice(1, 7)
    .map((field = '0') => Number(field));
  if (!fields) return undefined;
  const [year, month, day, hour, minute, second] = fields as [number, number, number, number, number, number];
  const written = new Date(0);
  written.setUTCFullYear(year, month - 1, day);
  written.setUTCHours(hour, minute, second);
  const date = new Date(text);
  const onCalendar =
    written.getUTCFullYear() === year &&
    written.getUTCMonth() === month - 1 &&
    written.getUTCDate() === day &&
    written.getUTCHours() === hour &&
    written.getUTCMinutes() === minute &&
    written.getUTCSeconds() === second;
  return onCalendar && !Number.isNaN(date.getTime()) ? date : undefined;
}

/**
 * The instant an expiry names. It must have the shape of DATE_TIME, be on the calendar (dateTimeOf), lie
 * after `now`, and not past LATEST_EXPIRY; an error of code PETSTORE_EXPIRY otherwise.
 */
export function parseExpiry(text: string, now: number): Date {
  if (!DATE_TIME.test(text)) throw new ExpiryFormatError();
  const date = dateTimeOf(text);
  if (!date) throw new ExpiryNotOnCalendarError(text);
  if (date.getTime() <= now) throw new ExpiryPastError();
  if (date.getTime() > Date.parse(LATEST_EXPIRY)) throw new ExpiryTooLateError(LATEST_EXPIRY);
  return date;
}
