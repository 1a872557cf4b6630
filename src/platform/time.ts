/** Durations in milliseconds, as Date.now() and timers count them: written once, read by name. */
export const MINUTE_MS = 60_000;
export const HOUR_MS = 60 * MINUTE_MS;
export const DAY_MS = 24 * HOUR_MS;
