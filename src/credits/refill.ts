import { errors } from '../platform/errors.js';
import { DAY_MS } from '../platform/time.js';

export const REFILL_INTERVALS = ['day', 'month'] as const;
export type RefillInterval = (typeof REFILL_INTERVALS)[number];

/** A monthly refill given no dayOfMonth refills on the 1st: calendar months, the same for every balance. */
export const DEFAULT_DAY_OF_MONTH = 1;

/** How a balance refills: `remaining` becomes `amount` at 00:00 UTC of each day, or of dayOfMonth each month. */
export interface Refill {
  interval: RefillInterval;
  amount: number;
  /** Monthly only: the day of the month, capped at the month's last day (31 refills on February 28, or 29). */
  dayOfMonth?: number;
}

/** The last day of a month (0 for January), in a year: 28 to 31. */
const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month + 1, 0)).getUTCDate();

/** 00:00 UTC of `day` (capped at the month's last) in a month counted from January of `year` (month 12 is next January). */
function refillDayOf(year: number, month: number, day: number): number {
  const first = new Date(Date.UTC(year, month, 1));
  return Date.UTC(first.getUTCFullYear(), first.getUTCMonth(), Math.min(day, daysIn(first.getUTCFullYear(), first.getUTCMonth())));
}

/**
 * When a refill is next due strictly after `after` (ms since the epoch): the next 00:00 UTC for a
 * daily one; for a monthly one, 00:00 UTC of its dayOfMonth, capped at the month's last day, in
 * this month if that is still ahead, else in the next. Strictly after, so a refill made at its
 * due instant is next due a period later, and one made late (instances down for days) once only.
 */
export function nextRefillAt(
  { interval, dayOfMonth = DEFAULT_DAY_OF_MONTH }: Pick<Refill, 'interval' | 'dayOfMonth'>,
  after: number,
): number {
  if (interval === 'day') return Math.floor(after / DAY_MS) * DAY_MS + DAY_MS;
  const at = new Date(after);
  const thisMonth = refillDayOf(at.getUTCFullYear(), at.getUTCMonth(), dayOfMonth);
  return thisMonth > after ? thisMonth : refillDayOf(at.getUTCFullYear(), at.getUTCMonth() + 1, dayOfMonth);
}

/** Credits as a create or change gives them: a balance, and how it refills. */
export interface CreditsInput {
  remaining: number;
  refill?: Refill;
}

/** A balance to set: what remains, its refill (a monthly one with its day), and when that is next due. */
export interface CreditsSetting {
  remaining: number;
  refill: Required<Refill> | { interval: 'day'; amount: number } | null;
  nextRefillAt: Date | null;
}

/**
 * The balance a create or change sets at `now`; a 400 naming the field for a dayOfMonth on a daily
 * refill (which the schema alone cannot say). The first refill is the next one due after now.
 */
export function creditsSetting({ remaining, refill }: CreditsInput, now: number, field = 'body/credits'): CreditsSetting {
  if (!refill) return { remaining, refill: null, nextRefillAt: null };
  if (refill.interval === 'day') {
    if (refill.dayOfMonth !== undefined) throw errors.badRequest(`${field}/refill/dayOfMonth is for a monthly refill only`);
    return { remaining, refill: { interval: 'day', amount: refill.amount }, nextRefillAt: new Date(nextRefillAt(refill, now)) };
  }
  const monthly = { interval: 'month' as const, amount: refill.amount, dayOfMonth: refill.dayOfMonth ?? DEFAULT_DAY_OF_MONTH };
  return { remaining, refill: monthly, nextRefillAt: new Date(nextRefillAt(monthly, now)) };
}
