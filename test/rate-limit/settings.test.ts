import { describe, expect, it } from 'vitest';
import { DOMAIN_CODES } from '../../src/platform/domain-errors.js';
import { checkCostsServed, checkPlanSettings } from '../../src/rate-limit/settings.js';

describe("the rate limiter's settings against its plans and operations", () => {
  const fitting = { costs: { createPet: 5 }, shadowPlans: ['free'], concurrency: { pro: 20 } };

  it('takes plans that are, and costs every plan can pay', () => {
    expect(() => checkPlanSettings(fitting)).not.toThrow();
  });

  it.each([
    [
      { ...fitting, shadowPlans: ['free', 'gold'] },
      'Invalid RATE_LIMIT_SHADOW_PLANS: no plan gold; the plans are free, pro, business, enterprise',
    ],
    [
      { ...fitting, concurrency: { silver: 3 } },
      'Invalid RATE_LIMIT_CONCURRENCY: no plan silver; the plans are free, pro, business, enterprise',
    ],
    [{ ...fitting, costs: { createPet: 61 } }, "Invalid RATE_LIMIT_COSTS: createPet costs 61, more than the free plan's 60 a minute"],
  ])('refuses %j with a configuration error naming the setting', (settings, message) => {
    expect(() => checkPlanSettings(settings)).toThrow(
      expect.objectContaining({ code: DOMAIN_CODES.config, message: expect.stringContaining(message) as string }),
    );
  });

  it('refuses a cost of an operation not served, naming those that are', () => {
    expect(() => checkCostsServed(['createPet'], new Set(['createPet', 'listPets']))).not.toThrow();
    expect(() => checkCostsServed(['createPets'], new Set(['createPet', 'listPets']))).toThrow(
      'Invalid RATE_LIMIT_COSTS: no operation createPets here; the operations are createPet, listPets',
    );
  });
});
