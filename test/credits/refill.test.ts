import { describe, expect, test } from 'vitest';
import { creditsSetting, nextRefillAt } from '../../src/credits/refill.js';

const at = (iso: string) => Date.parse(iso);
const next = (refill: Parameters<typeof nextRefillAt>[0], after: string) => new Date(nextRefillAt(refill, at(after))).toISOString();

describe('nextRefillAt', () => {
  test('daily: the next 00:00 UTC, strictly after (a refill at its instant is next due a day later)', () => {
    expect(next({ interval: 'day' }, '2026-11-22T10:00:00Z')).toBe('2026-11-23T00:00:00.000Z');
    expect(next({ interval: 'day' }, '2026-11-22T00:00:00Z')).toBe('2026-11-23T00:00:00.000Z');
    expect(next({ interval: 'day' }, '2026-11-22T23:59:59.999Z')).toBe('2026-11-23T00:00:00.000Z');
    expect(next({ interval: 'day' }, '2026-12-31T12:00:00Z')).toBe('2027-01-01T00:00:00.000Z');
  });

  test('monthly: the 1st by default, this month while its day is ahead, else the next', () => {
    expect(next({ interval: 'month' }, '2026-11-22T10:00:00Z')).toBe('2026-12-01T00:00:00.000Z');
    expect(next({ interval: 'month' }, '2026-12-01T00:00:00Z')).toBe('2027-01-01T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 15 }, '2026-11-10T00:00:00Z')).toBe('2026-11-15T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 15 }, '2026-11-15T00:00:00Z')).toBe('2026-12-15T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 15 }, '2026-11-15T00:00:00.001Z')).toBe('2026-12-15T00:00:00.000Z');
  });

  test('the year’s end: December’s refill is followed by January’s of the next year', () => {
    expect(next({ interval: 'month', dayOfMonth: 31 }, '2026-12-31T00:00:00Z')).toBe('2027-01-31T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 5 }, '2026-12-20T08:00:00Z')).toBe('2027-01-05T00:00:00.000Z');
  });

  test('day 31 refills on the month’s last day: February 28, or 29 in a leap year; then March 31', () => {
    expect(next({ interval: 'month', dayOfMonth: 31 }, '2027-01-31T00:00:00Z')).toBe('2027-02-28T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 31 }, '2027-02-28T00:00:00Z')).toBe('2027-03-31T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 31 }, '2028-01-31T00:00:00Z')).toBe('2028-02-29T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 31 }, '2028-02-28T00:00:00Z')).toBe('2028-02-29T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 31 }, '2026-04-15T00:00:00Z')).toBe('2026-04-30T00:00:00.000Z');
  });

  test('day 30 in February: the 28th (29th in a leap year), and March 30 after it', () => {
    expect(next({ interval: 'month', dayOfMonth: 30 }, '2027-02-01T00:00:00Z')).toBe('2027-02-28T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 30 }, '2027-02-28T00:00:00Z')).toBe('2027-03-30T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 30 }, '2028-02-10T00:00:00Z')).toBe('2028-02-29T00:00:00.000Z');
  });

  test('a refill made days late is next due once, after the time it was made', () => {
    expect(next({ interval: 'day' }, '2026-11-25T00:00:00.500Z')).toBe('2026-11-26T00:00:00.000Z');
    expect(next({ interval: 'month', dayOfMonth: 1 }, '2027-03-04T00:00:00Z')).toBe('2027-04-01T00:00:00.000Z');
  });
});

describe('creditsSetting', () => {
  test('a monthly refill gets its day (1 by default) and its first refill; a daily one has no day; none has neither', () => {
    const now = at('2026-11-22T10:00:00Z');
    expect(creditsSetting({ remaining: 5, refill: { interval: 'month', amount: 9 } }, now)).toEqual({
      remaining: 5,
      refill: { interval: 'month', amount: 9, dayOfMonth: 1 },
      nextRefillAt: new Date('2026-12-01T00:00:00Z'),
    });
    expect(creditsSetting({ remaining: 5, refill: { interval: 'day', amount: 9 } }, now)).toEqual({
      remaining: 5,
      refill: { interval: 'day', amount: 9 },
      nextRefillAt: new Date('2026-11-23T00:00:00Z'),
    });
    expect(creditsSetting({ remaining: 5 }, now)).toEqual({ remaining: 5, refill: null, nextRefillAt: null });
  });

  test('a dayOfMonth on a daily refill is a 400 naming it', () => {
    expect(() => creditsSetting({ remaining: 5, refill: { interval: 'day', amount: 9, dayOfMonth: 3 } }, 0)).toThrow(
      expect.objectContaining({
        statusCode: 400,
        code: 'bad_request',
        message: 'body/credits/refill/dayOfMonth is for a monthly refill only',
      }),
    );
  });
});
