import { Type, type Static } from '@sinclair/typebox';

/** How a window counts: `fixed` from its aligned start, `sliding` its current fixed window plus the previous one's share still inside it. */
export const ALGORITHMS = ['fixed', 'sliding'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];

/** The longest window: 31 days, a month's worth. */
export const MAX_WINDOW_SECONDS = 2_678_400;
/** A PostgreSQL integer's ceiling. */
export const MAX_LIMIT = 2_147_483_647;
/** Windows in one list at most. */
export const MAX_WINDOWS = 5;

/** One named window of a list of limits, as the admin API takes and shows it. */
export const LimitWindow = Type.Object(
  {
    name: Type.String({
      pattern: '^[a-z][a-z0-9_]{0,15}$',
      description: 'The window’s name, unique in its list: a lower-case letter, then up to 15 lower-case letters, digits or _',
      'x-error-message': 'must be a lower-case letter then up to 15 lower-case letters, digits or _',
    }),
    limit: Type.Integer({
      minimum: 1,
      maximum: MAX_LIMIT,
      description: 'Units the window allows (requests, unless an operation costs more)',
      'x-error-message': `must be an integer from 1 to ${MAX_LIMIT}`,
    }),
    windowSeconds: Type.Integer({
      minimum: 1,
      maximum: MAX_WINDOW_SECONDS,
      description: 'The window’s length in seconds, 1 to 2678400 (31 days); a fixed one is aligned to multiples of it in Unix time',
      'x-error-message': `must be an integer from 1 to ${MAX_WINDOW_SECONDS}`,
    }),
    algorithm: Type.Optional(
      Type.Union(
        ALGORITHMS.map((algorithm) => Type.Literal(algorithm)),
        {
          default: 'fixed',
          description:
            'fixed (the default): counts from the window’s aligned start; sliding: counts the current fixed window plus the previous one weighted by its share still inside the last windowSeconds',
          'x-error-message': 'must be fixed or sliding',
        },
      ),
    ),
  },
  { title: 'LimitWindow', additionalProperties: false },
);
export type LimitWindow = Static<typeof LimitWindow>;

/** A list of named windows: a request is served only if every one has room for its cost. */
export const Limits = Type.Array(LimitWindow, {
  minItems: 1,
  maxItems: MAX_WINDOWS,
  description:
    '1 to 5 named windows, names unique: a request is served only when every window has room for its cost, and counts in all of them',
  'x-error-message': 'must be a list of 1 to 5 windows',
});

/** A window as the limiter decides it: its algorithm filled in. */
export interface RateWindow {
  readonly name: string;
  readonly limit: number;
  readonly windowSeconds: number;
  readonly algorithm: Algorithm;
}

/** Limits as the limiter takes them: shortest window first (by name on a tie), each algorithm filled in. */
export type Limits = readonly RateWindow[];

/** The limiter's form of a list of windows (see Limits). */
export function normalizeLimits(windows: readonly LimitWindow[]): Limits {
  return windows
    .map(({ name, limit, windowSeconds, algorithm = 'fixed' }) => ({ name, limit, windowSeconds, algorithm }))
    .sort((a, b) => a.windowSeconds - b.windowSeconds || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The first name a list repeats; undefined when each is unique (a rule TypeBox cannot state). */
export const repeatedName = (windows: readonly Pick<LimitWindow, 'name'>[]) =>
  windows.map(({ name }) => name).find((name, i, names) => names.indexOf(name) !== i);

/** The short form of the plans before limits were data: a fixed minute and a fixed day, so named. */
export const minuteAndDay = (perMinute: number, perDay: number): Limits => [
  { name: 'minute', limit: perMinute, windowSeconds: 60, algorithm: 'fixed' },
  { name: 'day', limit: perDay, windowSeconds: 86_400, algorithm: 'fixed' },
];
