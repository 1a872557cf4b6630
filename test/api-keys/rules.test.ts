import { expect } from 'vitest';
import { createAdminAuditRepository, type Actor } from '../../src/audit/repository.js';
import { API_KEY_CODES } from '../../src/api-keys/errors.js';
import { PLAN_CODES } from '../../src/plans/errors.js';
import { DEFAULT_OVERLAP_SECONDS } from '../../src/api-keys/lifecycle.js';
import { createApiKeysRepository } from '../../src/api-keys/repository.js';
import { createKeyRules, newKey } from '../../src/api-keys/rules.js';
import type { Database } from '../../src/platform/db/database.js';
import { databaseTest } from '../support/fixtures.js';
import { minuteAndDay } from '../../src/plans/limits.js';

const test = databaseTest();

const OPERATOR: Actor = { name: 'test:rules', adminTokenId: null };
const NOW = Date.parse('2030-01-01T00:00:00Z');

function rulesOn(db: Database) {
  const keys = createApiKeysRepository(db);
  const audit = createAdminAuditRepository(db);
  /** The audit entries of a key, oldest first. */
  const trailOf = async (keyId: number) => (await audit.page({ limit: 1_000 })).entries.filter((entry) => entry.keyId === keyId).reverse();
  return { keys, rules: createKeyRules(db, keys, {}), trailOf };
}

test('newKey checks the expiry and touches no database: the plan and limits are checked by the create, with the plans table', () => {
  expect(newKey({ plan: 'enterprise', perMinute: 5, perDay: 50, expiresAt: '2031-01-01T00:00:00Z', name: 'big' }, NOW)).toEqual({
    plan: 'enterprise',
    name: 'big',
    perMinute: 5,
    perDay: 50,
    expiresAt: new Date('2031-01-01T00:00:00Z'),
  });
  expect(newKey({ plan: 'gold', perMinute: 5 }, NOW)).toMatchObject({ plan: 'gold', perMinute: 5, expiresAt: undefined });
  expect(() => newKey({ plan: 'pro', expiresAt: '2029-12-31T23:59:59Z' }, NOW)).toThrow(
    expect.objectContaining({ code: API_KEY_CODES.expiry, message: 'must be in the future' }),
  );
});

test('create checks the plan (in the table) and the limits (a plan without limits needs some), writing nothing when refused', async ({
  database,
}) => {
  const { keys, rules } = rulesOn(database.db);
  const before = (await keys.list()).length;
  await expect(rules.create({ plan: 'gold' })).rejects.toMatchObject({
    code: API_KEY_CODES.unknownPlan,
    message: 'is gold, which names no plan',
  });
  await expect(rules.create({ plan: 'enterprise' })).rejects.toMatchObject({
    code: PLAN_CODES.limits,
    message: 'the enterprise plan has no limits of its own: a key of it needs limits (or perMinute and perDay)',
  });
  const windows = [
    { name: 'day', limit: 50, windowSeconds: 86_400 },
    { name: 'day', limit: 5, windowSeconds: 60 },
  ];
  await expect(rules.create({ plan: 'pro', limits: windows })).rejects.toMatchObject({
    code: PLAN_CODES.limits,
    field: 'limits/1/name',
  });
  expect((await keys.list()).length).toBe(before);
  // The short form alone is limits enough, a minute of its own.
  expect((await rules.create({ plan: 'enterprise', perMinute: 5 })).record).toMatchObject({
    limits: [{ name: 'minute', limit: 5, windowSeconds: 60, algorithm: 'fixed' }],
    perMinute: 5,
    perDay: null,
  });
});

test('create stores the key and its audit entry in the caller transaction: rolled back, neither is left', async ({ database }) => {
  const { keys, rules, trailOf } = rulesOn(database.db);
  const before = (await keys.list()).length;
  let issuedId: number | undefined;
  await expect(
    database.db.transaction(async (tx) => {
      issuedId = (await rules.create({ plan: 'pro', name: 'rolled back' }, { tx, actor: OPERATOR })).id;
      throw new Error('the request failed after the key was made');
    }),
  ).rejects.toThrow('the request failed');
  expect((await keys.list()).length).toBe(before);
  expect(await trailOf(issuedId!)).toEqual([]);

  const { id } = await rules.create(newKey({ plan: 'free', name: 'kept' }, NOW), { actor: OPERATOR });
  expect(await trailOf(id)).toMatchObject([
    {
      action: 'key.create',
      actor: 'test:rules',
      details: { plan: 'free', name: 'kept', limits: null, perMinute: 60, perDay: 1_000, expiresAt: null, readOnly: false },
    },
  ]);
});

test('rotate keeps the old key a day by default, in the same quota, and refuses a rotated or revoked key', async ({ database }) => {
  const { keys, rules, trailOf } = rulesOn(database.db);
  const limits = [
    { name: 'second', limit: 2, windowSeconds: 1, algorithm: 'sliding' as const },
    { name: 'minute', limit: 7, windowSeconds: 60, algorithm: 'fixed' as const },
    { name: 'day', limit: 70, windowSeconds: 86_400, algorithm: 'fixed' as const },
  ];
  const { id } = await rules.create({ plan: 'enterprise', limits, name: 'chain' });
  const successor = (await rules.rotate(id, {}, { actor: OPERATOR }))!;
  expect(successor.record).toMatchObject({
    plan: 'enterprise',
    limits,
    perMinute: 7,
    perDay: 70,
    name: 'chain',
    quotaId: id,
    state: 'active',
  });
  const old = (await keys.get(id))!;
  expect(old).toMatchObject({ state: 'rotated', replacedBy: successor.id, revokedAt: null });
  const overlap = Date.parse(old.expiresAt!) - Date.now();
  expect(overlap).toBeGreaterThan((DEFAULT_OVERLAP_SECONDS - 60) * 1_000);
  expect(overlap).toBeLessThanOrEqual(DEFAULT_OVERLAP_SECONDS * 1_000);
  expect(await trailOf(id)).toMatchObject([
    { action: 'key.rotate', details: { newKeyId: successor.id, overlapSeconds: DEFAULT_OVERLAP_SECONDS } },
  ]);

  const refusal = { code: API_KEY_CODES.keyState, message: `API key ${id} was rotated into key ${successor.id}; create a new key instead` };
  await expect(rules.rotate(id)).rejects.toMatchObject(refusal);
  await rules.revoke(successor.id);
  await expect(rules.update(successor.id, { name: 'late' })).rejects.toMatchObject({
    code: API_KEY_CODES.keyState,
    message: `API key ${successor.id} is revoked; change its successor, or create a new key`,
  });
  expect(await rules.rotate(999_999)).toBeUndefined();
});

test('update changes the quota of every key still in its overlap, records before and after, and records nothing when nothing changes', async ({
  database,
}) => {
  const { keys, rules, trailOf } = rulesOn(database.db);
  const { id: first } = await rules.create({ plan: 'pro', name: 'quota' });
  const { id: second } = (await rules.rotate(first, { overlapSeconds: 3_600 }))!;
  const updated = await rules.update(second, { plan: 'enterprise', perMinute: 9, perDay: 90 }, { actor: OPERATOR });
  expect(updated).toMatchObject({ id: second, plan: 'enterprise', perMinute: 9, perDay: 90, name: 'quota' });
  expect(await keys.get(first)).toMatchObject({ plan: 'enterprise', perMinute: 9, perDay: 90, state: 'rotated' });
  expect(await trailOf(second)).toMatchObject([
    {
      action: 'key.update',
      details: {
        before: { plan: 'pro', limits: null, perMinute: 300, perDay: 10_000, name: 'quota' },
        after: {
          plan: 'enterprise',
          limits: minuteAndDay(9, 90),
          perMinute: 9,
          perDay: 90,
          name: 'quota',
        },
        sameQuota: [first],
      },
    },
  ]);

  expect(await rules.update(second, { perMinute: 9 }, { actor: OPERATOR })).toEqual(updated);
  expect(await trailOf(second)).toHaveLength(1);
  await expect(rules.update(second, { limits: null })).rejects.toMatchObject({ code: PLAN_CODES.limits });
  await expect(rules.update(second, { plan: 'gold' })).rejects.toMatchObject({ code: API_KEY_CODES.unknownPlan });
  // A move to a plan with limits takes its windows; the short form then changes them for the key alone.
  expect(await rules.update(second, { plan: 'free', perDay: 5 })).toMatchObject({
    plan: 'free',
    limits: minuteAndDay(60, 5),
    perMinute: 60,
    perDay: 5,
  });
  expect(await rules.update(999_999, { name: 'nobody' })).toBeUndefined();
});

test('revoke takes along the older keys still in their overlap, never the successor, and is recorded once', async ({ database }) => {
  const { keys, rules, trailOf } = rulesOn(database.db);
  const { id: first } = await rules.create({ plan: 'business' });
  const { id: second } = (await rules.rotate(first, { overlapSeconds: 3_600 }))!;
  const { id: third } = (await rules.rotate(second, { overlapSeconds: 3_600 }))!;
  expect(await rules.revoke(second, { actor: OPERATOR })).toMatchObject({ id: second, state: 'revoked' });
  expect((await keys.get(first))!.state).toBe('revoked');
  expect((await keys.get(third))!.state).toBe('active');
  expect(await rules.revoke(second, { actor: OPERATOR })).toMatchObject({ id: second, state: 'revoked' });
  expect(await trailOf(second)).toMatchObject([{ action: 'key.revoke', details: { sameQuota: [first] } }]);
  expect(await rules.revoke(999_999)).toBeUndefined();
});
