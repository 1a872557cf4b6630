/** Times and clocks the tests share. */
export { setTimeout as sleep } from 'node:timers/promises';

export const MINUTE = 60_000;
export const DAY = 24 * 60 * MINUTE;
/** The start of a minute, so that a test's requests share one window until it moves the clock. */
export const T0 = Date.UTC(2026, 10, 22, 10, 0, 0);
/** The sunset of /v1 the app is built with: from then on it answers 410. */
export const SUNSET = Date.UTC(2030, 11, 5);

/** A clock a test moves by hand; `now` is what the app is given as its time. */
export interface TestClock {
  now: () => number;
  set: (time: number) => void;
  advance: (ms: number) => number;
}

export function testClock(start = T0): TestClock {
  let time = start;
  return {
    now: () => time,
    set: (next) => void (time = next),
    advance: (ms) => (time += ms),
  };
}
