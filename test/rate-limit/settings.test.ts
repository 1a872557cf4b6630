import { describe, expect, it } from 'vitest';
import { minuteAndDay } from '../../src/plans/limits.js';
import { DOMAIN_CODES } from '../../src/platform/domain-errors.js';
import { checkCostsFitPlans, checkCostsServed } from '../../src/rate-limit/settings.js';
import { buildTestApp } from '../support/app.js';

describe("the rate limiter's settings against its plans and operations", () => {
  const plans = [
    { name: 'free', limits: minuteAndDay(60, 1_000), concurrency: 5, shadow: false },
    { name: 'enterprise', limits: null, concurrency: 100, shadow: false },
  ];

  it('takes costs every plan can pay (a plan whose keys carry their own windows pays any)', () => {
    expect(() => checkCostsFitPlans(plans, { createPet: 60 })).not.toThrow();
  });

  it('refuses a cost above a window of a plan, with a configuration error naming the setting', () => {
    expect(() => checkCostsFitPlans(plans, { createPet: 61 })).toThrow(
      expect.objectContaining({
        code: DOMAIN_CODES.config,
        message: expect.stringContaining("Invalid RATE_LIMIT_COSTS: createPet costs 61, more than the free plan's 60 a minute") as string,
      }),
    );
  });

  it('stops the start when a setting names a plan that is no row of the plans table', async () => {
    await expect(buildTestApp({ RATE_LIMIT_CONCURRENCY: 'free=2,silver=3' })).rejects.toThrow(
      'Invalid RATE_LIMIT_CONCURRENCY: no plan silver; the plans are business, enterprise, free, pro',
    );
  });

  it('refuses a cost of an operation not served, naming those that are', () => {
    expect(() => checkCostsServed(['createPet'], new Set(['createPet', 'listPets']))).not.toThrow();
    expect(() => checkCostsServed(['createPets'], new Set(['createPet', 'listPets']))).toThrow(
      'Invalid RATE_LIMIT_COSTS: no operation createPets here; the operations are createPet, listPets',
    );
  });
});
