import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually.js';
import { openModelService, type ModelService } from '../support/credits-model.js';
import { bearer, waitForKeyOnApp } from '../support/keys.js';
import { REDIS_URL } from '../support/redis.js';
import { DAY, MINUTE } from '../support/time.js';
import { minuteAndDay } from '../../src/plans/limits.js';

// Issue 54, "A net for the money code": random sequences of spending, admin operations, refills,
// removals, failed writes, restarts (and on Redis flushes and kills) against a plain model of the
// balances. After every step the service served exactly what the model says (so never more than
// was bought); once the writes settle, the record, the admin API's `remaining` and the usage record
// equal the model's. Random each run: a failure prints its seed and shrunk path to replay it
// (fc.assert's `seed` and `path`).

/** What a getPet costs (RATE_LIMIT_COSTS); a listPets costs 1. */
const GET_PET_COST = 3;
/** The quota endpoint costs nothing, and reads no database once the balances are seeded: counted while a usage write is under way. */
const OPERATIONS = {
  listPets: { url: '/v1/pets?limit=1', cost: 1 },
  getPet: { url: '/v1/pets/1', cost: GET_PET_COST },
  getRateLimit: { url: '/v1/rate_limit', cost: 0 },
} as const;
type Operation = keyof typeof OPERATIONS;

type Owner = 'key' | 'customer';
const OWNERS: Owner[] = ['key', 'customer'];

/** A balance as a PATCH sets it: what remains, and a daily refill's amount (or null for none). */
interface Credits {
  remaining: number;
  refill: number | null;
}

interface Balance extends Credits {
  /** Units served in this version (since the balance was made, set or refilled): what the record's `spent` must reach. */
  spent: number;
  /** Spending served since the record last caught up (a settle or a graceful restart). */
  unrecorded: boolean;
}

interface Usage {
  requests: number;
  units: number;
  credits: number;
}

/** The model: the two balances, and each key's usage. Key 0 spends its own balance and its customer's; key 1 its customer's. */
interface Model {
  balances: Record<Owner, Balance | null>;
  usage: [Usage, Usage];
  /** Whether the run restarted or killed the instance: once per run, a new instance takes seconds to start on PGlite. */
  restarted: boolean;
}

/** One run's customer and its two keys, on the service. */
interface Real {
  service: ModelService;
  customerId: number;
  keys: Array<{ id: number; headers: { authorization: string } }>;
}

const balancesOf = (model: Model, key: number) => (key === 0 ? OWNERS : (['customer'] as const)).map((owner) => model.balances[owner]);
const pathOf = (real: Real, owner: Owner) =>
  owner === 'key' ? `/admin/v1/keys/${real.keys[0]!.id}` : `/admin/v1/customers/${real.customerId}`;

/** The admin request, checked to be answered `status`, then the instance caught up with the balance's notice. */
async function change(real: Real, method: string, path: string, json: unknown, status = 200) {
  const response = await real.service.admin.request(method, path, { json });
  expect(response.status, `${method} ${path} ${JSON.stringify(json)}: ${JSON.stringify(response.body)}`).toBe(status);
  expect(await real.service.t.app.keyNotices.catchUp()).toBe(true);
}

/**
 * Sends `count` requests of the operation at once with the key; the model says how many are served,
 * and the rest are refused for credits. Answers the units spent from balances.
 */
async function spend(model: Model, real: Real, key: number, operation: Operation, count: number, counted = true) {
  const { url, cost } = OPERATIONS[operation];
  const balances = balancesOf(model, key).filter((balance) => balance !== null);
  const affordable = cost === 0 ? count : Math.min(...balances.map(({ remaining }) => Math.floor(remaining / cost)));
  const served = Math.min(count, affordable);
  const { headers } = real.keys[key]!;
  const responses = await Promise.all(Array.from({ length: count }, () => real.service.t.app.inject({ url, headers })));
  // Served: the listing and the quota 200, a pet that may not exist 404 (counted as served all the same).
  for (const response of responses) expect([200, 404, 429], response.body).toContain(response.statusCode);
  const refused = responses.filter(({ statusCode }) => statusCode === 429);
  for (const response of refused) expect(response.json().code).toBe('credits_exhausted');
  expect(responses.length - refused.length, `served of ${count} ${operation} by key ${key}`).toBe(served);
  for (const balance of balances) {
    balance.remaining -= served * cost;
    balance.spent += served * cost;
    if (served * cost > 0) balance.unrecorded = true;
  }
  if (counted) {
    const usage = model.usage[key]!;
    usage.requests += served;
    usage.units += served * cost;
    usage.credits += count - served;
  }
  // The units spent from the balances: what the ledger has to write.
  return balances.length > 0 ? served * cost : 0;
}

type Command = fc.AsyncCommand<Model, Real>;

/** A balance in a new version (made, set, replaced or refilled): nothing spent in it yet. */
const newBalance = (credits: Credits): Balance => ({ ...credits, spent: 0, unrecorded: false });

class Spend implements Command {
  constructor(
    readonly key: number,
    readonly operation: Operation,
    readonly count: number,
  ) {}
  check = () => true;
  async run(model: Model, real: Real) {
    await spend(model, real, this.key, this.operation, this.count);
  }
  toString = () => `spend(key ${this.key}, ${this.count} × ${this.operation})`;
}

class Operate implements Command {
  constructor(
    readonly owner: Owner,
    readonly operation: 'set' | 'increment' | 'decrement',
    readonly amount: number,
  ) {}
  check() {
    return true;
  }
  async run(model: Model, real: Real) {
    const balance = model.balances[this.owner];
    const { operation, amount } = this;
    if (operation === 'decrement' && !balance) {
      await change(real, 'POST', `${pathOf(real, this.owner)}/credits`, { operation, amount }, 409);
      return;
    }
    await change(real, 'POST', `${pathOf(real, this.owner)}/credits`, { operation, amount });
    // A set is a new version: spending of the one before is no longer the record's.
    if (operation === 'set') model.balances[this.owner] = newBalance({ remaining: amount, refill: balance?.refill ?? null });
    else if (operation === 'increment')
      model.balances[this.owner] = {
        ...newBalance({ remaining: 0, refill: null }),
        ...balance,
        remaining: (balance?.remaining ?? 0) + amount,
      };
    // A decrement too: it takes the amount off the live balance and starts a version from what is left.
    else model.balances[this.owner] = newBalance({ remaining: Math.max(0, balance!.remaining - amount), refill: balance!.refill });
  }
  toString = () => `${this.operation}(${this.owner}, ${this.amount})`;
}

/** A PATCH of the owner's credits: a new balance with its refill (a new version), or none (removed). */
class Replace implements Command {
  constructor(
    readonly owner: Owner,
    readonly credits: Credits | null,
  ) {}
  check = () => true;
  async run(model: Model, real: Real) {
    const { credits } = this;
    const body = credits && {
      remaining: credits.remaining,
      ...(credits.refill === null ? {} : { refill: { interval: 'day', amount: credits.refill } }),
    };
    await change(real, 'PATCH', pathOf(real, this.owner), { credits: body });
    model.balances[this.owner] = credits && newBalance(credits);
  }
  toString = () => (this.credits ? `replace(${this.owner}, ${JSON.stringify(this.credits)})` : `remove(${this.owner})`);
}

/** The app's clock moved to the next 00:00 UTC: every balance with a refill is refilled (a new version). */
class Refill implements Command {
  check = () => true;
  async run(model: Model, { service }: Real) {
    const { clock, t } = service;
    clock.set((Math.floor(clock.now() / DAY) + 1) * DAY + MINUTE);
    const due = async () =>
      (
        await t.db.query<{ due: number }>('SELECT count(*)::int AS due FROM credit_balances WHERE next_refill_at <= $1', [
          new Date(clock.now()),
        ])
      )[0]!.due;
    await eventually(async () => (await due()) === 0);
    expect(await t.app.keyNotices.catchUp()).toBe(true);
    for (const balance of Object.values(model.balances)) {
      if (balance?.refill != null) Object.assign(balance, newBalance({ remaining: balance.refill, refill: balance.refill }));
    }
  }
  toString = () => 'refill';
}

class Restart implements Command {
  check = (model: Model) => !model.restarted;
  async run(model: Model, { service }: Real) {
    model.restarted = true;
    await service.restart();
    for (const balance of Object.values(model.balances)) if (balance) balance.unrecorded = false;
  }
  toString = () => 'restart';
}

class FlushRedis implements Command {
  check = () => true;
  run = (_model: Model, { service }: Real) => service.flushRedis();
  toString = () => 'flushRedis';
}

/** Spending while the ledger's batch write fails (at least one write fails, then it works again). */
class LedgerWriteFails implements Command {
  constructor(
    readonly key: number,
    readonly count: number,
  ) {}
  check = () => true;
  async run(model: Model, real: Real) {
    const { service } = real;
    const before = service.failures('ledger');
    await service.failing(['ledger'], async () => {
      // Units spent: the ledger's next write (within a second) fails.
      if ((await spend(model, real, this.key, 'listPets', this.count)) > 0) await service.failedSince('ledger', before);
    });
  }
  toString = () => `ledgerWriteFails(key ${this.key}, ${this.count} × listPets)`;
}

/** Spending while the usage record's write fails (one flush fails, then writes work again). */
class UsageWriteFails implements Command {
  constructor(
    readonly key: number,
    readonly count: number,
  ) {}
  check = () => true;
  async run(model: Model, real: Real) {
    const { service } = real;
    const before = service.failures('usage');
    // A minute of its own: the quota endpoint answers 60 lookups a minute.
    service.clock.advance(MINUTE);
    await service.failing(['usage'], async () => {
      await spend(model, real, this.key, 'listPets', this.count);
      await spend(model, real, this.key, 'getRateLimit', this.count);
      // More counted while the failing write is under way: its counts put back must add to them, not replace them.
      await Promise.all([service.t.app.usage.flush(), spend(model, real, this.key, 'getRateLimit', this.count)]);
    });
    expect(service.failures('usage')).toBeGreaterThan(before);
  }
  toString = () =>
    `usageWriteFails(key ${this.key}, ${this.count} × listPets and getRateLimit, ${this.count} × getRateLimit during the write)`;
}

/** The instance dies right after spending (its unwritten ledger and usage lost); the balances live on in Redis. */
class Kill implements Command {
  constructor(
    readonly key: number,
    readonly count: number,
  ) {}
  check = (model: Model) => !model.restarted;
  async run(model: Model, real: Real) {
    model.restarted = true;
    await real.service.t.app.usage.flush();
    // The ledger's writes fail from the requests on: the instance surely dies with their units unwritten.
    await real.service.failing(['ledger'], async () => {
      await spend(model, real, this.key, 'listPets', this.count, false);
      await real.service.kill();
    });
    // While Redis holds the live balance, the record converges to it (finding 5), before anything else can lose it.
    await settled(model, real);
  }
  toString = () => `kill(after key ${this.key}, ${this.count} × listPets)`;
}

/** Waits for the writes to settle, then compares the record, the admin API and the usage record with the model. */
async function settled(model: Model, real: Real) {
  const { t, admin, clock } = real.service;
  const standing = (balance: { remaining: number; spent: number } | undefined | null) =>
    balance ? { remaining: balance.remaining, spent: balance.spent } : null;
  const expected = Object.fromEntries(OWNERS.map((owner) => [owner, standing(model.balances[owner])]));
  const recorded = async () => {
    const rows = await t.db.query<{ owner: Owner; remaining: string | number; spent: string | number }>(
      `SELECT CASE WHEN customer_id IS NULL THEN 'key' ELSE 'customer' END AS owner, base - spent AS remaining, spent
       FROM credit_balances WHERE quota_id = $1 OR customer_id = $2`,
      [real.keys[0]!.id, real.customerId],
    );
    const of = (owner: Owner) => rows.find((row) => row.owner === owner);
    return Object.fromEntries(
      OWNERS.map((owner) => [owner, standing(of(owner) && { remaining: Number(of(owner)!.remaining), spent: Number(of(owner)!.spent) })]),
    );
  };
  // Settled once the ledger (writing once a second) has written every unit served in each balance's version.
  const spentOf = (standings: Record<string, { spent: number } | null>) => JSON.stringify(OWNERS.map((owner) => standings[owner]?.spent));
  await eventually(async () => spentOf(await recorded()) === spentOf(expected)).catch(() => {});
  expect(await recorded(), 'the record (credit_balances: base - spent, and spent in the version)').toEqual(expected);
  const remaining = Object.fromEntries(OWNERS.map((owner) => [owner, model.balances[owner]?.remaining ?? null]));
  const shown = {
    key: (await admin.request('GET', pathOf(real, 'key'))).body.credits?.remaining ?? null,
    customer: (await admin.request('GET', pathOf(real, 'customer'))).body.credits?.remaining ?? null,
  };
  expect(shown, "the admin API's remaining").toEqual(remaining);
  await t.app.usage.flush();
  const start = new Date(Math.floor(clock.now() / DAY) * DAY - 30 * DAY).toISOString();
  const end = new Date((Math.floor(clock.now() / DAY) + 1) * DAY).toISOString();
  for (const [key, { id }] of real.keys.entries()) {
    const { body } = await admin.request('GET', `/admin/v1/usage?keyId=${id}&granularity=day&start=${start}&end=${end}`);
    const total = { requests: 0, units: 0, credits: 0 };
    for (const row of body as Array<{ requests: number; units: number; refused: { credits: number } }>) {
      total.requests += row.requests;
      total.units += row.units;
      total.credits += row.refused.credits;
    }
    expect(total, `the usage record of key ${key}`).toEqual(model.usage[key]);
  }
  for (const balance of Object.values(model.balances)) if (balance) balance.unrecorded = false;
}

class Settle implements Command {
  check = () => true;
  run = settled;
  toString = () => 'settle';
}

const owner = fc.constantFrom<Owner>(...OWNERS);
const key = fc.constantFrom(0, 1);
const amount = fc.integer({ min: 1, max: 12 });
/** A balance a PATCH gives: small, so that requests run it out within a run; a daily refill or none. */
const credits = fc.record({ remaining: fc.nat(12), refill: fc.option(fc.nat(12)) });
/** Each owner's balance at a run's start: mostly one. */
const initialBalances = fc.record({ key: fc.option(credits, { freq: 5 }), customer: fc.option(credits, { freq: 5 }) });

/** The commands, weighted: mostly what moves money (spending and the admin operations). */
function commandsFor(redis: boolean) {
  const spending = fc.tuple(key, fc.constantFrom<Operation>('listPets', 'getPet'), fc.integer({ min: 1, max: 6 }));
  const fewRequests = fc.tuple(key, fc.integer({ min: 1, max: 4 }));
  const operations = fc.constantFrom('set' as const, 'increment' as const, 'decrement' as const);
  return [
    fc.oneof(
      { weight: 5, arbitrary: spending.map(([k, op, n]) => new Spend(k, op, n)) },
      { weight: 4, arbitrary: fc.tuple(owner, operations, amount).map(([o, op, n]) => new Operate(o, op, op === 'set' ? n - 1 : n)) },
      { weight: 2, arbitrary: fc.tuple(owner, fc.option(credits, { freq: 3 })).map(([o, c]) => new Replace(o, c)) },
      { weight: 1, arbitrary: fc.constant(new Refill()) },
      { weight: 1, arbitrary: fc.constant(new Restart()) },
      { weight: 2, arbitrary: fewRequests.map(([k, n]) => new LedgerWriteFails(k, n)) },
      { weight: 2, arbitrary: fewRequests.map(([k, n]) => new UsageWriteFails(k, n)) },
      { weight: 1, arbitrary: fc.constant(new Settle()) },
      ...(redis ? [{ weight: 1, arbitrary: fc.constant(new FlushRedis()) }] : []),
      ...(redis ? [{ weight: 1, arbitrary: fewRequests.map(([k, n]) => new Kill(k, n)) }] : []),
    ),
  ];
}

let customers = 0;

/** A run's fresh customer and keys (known to the instance; each key's probe counted as one listPets served) with the balances given. */
async function freshRun(service: ModelService, balances: Record<Owner, Credits | null>): Promise<{ model: Model; real: Real }> {
  const { t } = service;
  const customer = await service.admin.request('POST', '/admin/v1/customers', { json: { externalId: `cus_model_${++customers}` } });
  expect(customer.status).toBe(201);
  const keys = [];
  for (let i = 0; i < 2; i++) {
    const { key, record } = await t.app.apiKeysRepository.create({
      plan: 'enterprise',
      limits: minuteAndDay(1e9, 2e9),
      concurrency: 100_000,
      customerId: customer.body.id,
    });
    await waitForKeyOnApp(t.app, bearer(key));
    keys.push({ id: record.id, headers: bearer(key) });
  }
  const probe = () => ({ requests: 1, units: 1, credits: 0 });
  const model: Model = { balances: { key: null, customer: null }, usage: [probe(), probe()], restarted: false };
  const real = { service, customerId: customer.body.id, keys };
  for (const owner of OWNERS) if (balances[owner]) await new Replace(owner, balances[owner]).run(model, real);
  return { model, real };
}

describe.each([
  { store: 'memory', redis: false, runs: 5 },
  { store: 'redis', redis: true, runs: 6 },
])('credits against a model of the balances, on the $store store', ({ redis, runs }) => {
  it.skipIf(redis && !REDIS_URL)(
    'serves what the model says after every step; once settled, the record, the admin API and the usage record are the model',
    async () => {
      const service = await openModelService({ redis, env: { RATE_LIMIT_COSTS: `getPet=${GET_PET_COST}` } });
      try {
        await fc.assert(
          fc.asyncProperty(initialBalances, fc.commands(commandsFor(redis), { maxCommands: 10 }), async (balances, commands) => {
            const { model, real } = await freshRun(service, balances);
            await fc.asyncModelRun(() => ({ model, real }), commands);
            await settled(model, real);
          }),
          { numRuns: Number(process.env.CREDITS_MODEL_RUNS) || runs },
        );
      } finally {
        await service.close();
      }
    },
    600_000,
  );
});
