import { expect, test } from 'vitest';
import { minuteAndDay } from '../../src/plans/limits.js';
import { PlanCache } from '../../src/plans/plan-cache.js';
import type { PlanRecord } from '../../src/plans/repository.js';

const row = (name: string, settings: Partial<PlanRecord> = {}): PlanRecord => ({
  name,
  limits: minuteAndDay(60, 1000),
  concurrency: null,
  shadow: false,
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
  ...settings,
});

/** A load whose reads resolve when the test says, in any order. */
function controlledLoad() {
  const pending: ((rows: PlanRecord[] | Error) => void)[] = [];
  const load = () =>
    new Promise<PlanRecord[]>((resolve, reject) => pending.push((rows) => (rows instanceof Error ? reject(rows) : resolve(rows))));
  return { load, pending };
}

const NO_OVERRIDES = { shadowPlans: [], concurrency: null };

test('a read that started before another never replaces what the later one read', async () => {
  const { load, pending } = controlledLoad();
  const book = new PlanCache(load, NO_OVERRIDES, () => {});
  const older = book.reload();
  const newer = book.reload();
  pending[1]!([row('free', { concurrency: 2 })]);
  await newer;
  pending[0]!([row('free', { concurrency: 1 })]);
  await older;
  expect(book.get('free')?.concurrency).toBe(2);
});

test('a failed read keeps the plans held, and is told; a plan gone from the table is gone from the book', async () => {
  const { load, pending } = controlledLoad();
  const errors: unknown[] = [];
  const book = new PlanCache(load, NO_OVERRIDES, (error) => errors.push(error));
  const started = book.start();
  pending[0]!([row('free'), row('gold')]);
  await started;
  const failed = book.reload();
  pending[1]!(new Error('connection lost'));
  await failed;
  expect(errors).toHaveLength(1);
  expect(book.get('gold')).toBeDefined();
  const again = book.reload();
  pending[2]!([row('free')]);
  await again;
  expect(book.get('gold')).toBeUndefined();
});

test('RATE_LIMIT_SHADOW_PLANS wins over the rows it names, and only those; RATE_LIMIT_CONCURRENCY, set, over every row', async () => {
  const rows = [row('free', { concurrency: 9 }), row('pro', { shadow: false, concurrency: 4 }), row('gold', { shadow: true })];
  const book = new PlanCache(
    async () => rows,
    { shadowPlans: ['pro'], concurrency: { free: 2 } },
    () => {},
  );
  await book.start();
  expect(book.get('free')).toEqual({ name: 'free', limits: minuteAndDay(60, 1000), concurrency: 2, shadow: false });
  // Not named: no limit, as before plans were rows.
  expect(book.get('pro')).toMatchObject({ concurrency: null, shadow: true });
  expect(book.get('gold')).toMatchObject({ concurrency: null, shadow: true });
  const unset = new PlanCache(
    async () => rows,
    { shadowPlans: [], concurrency: null },
    () => {},
  );
  await unset.start();
  expect(unset.get('pro')).toMatchObject({ concurrency: 4, shadow: false });
});
