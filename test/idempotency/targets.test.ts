import { hash } from 'node:crypto';
import Fastify from 'fastify';
import { Type } from '@sinclair/typebox';
import { describe, expect } from 'vitest';
import idempotency from '../../src/idempotency/plugin.js';
import { createIdempotencyKeysRepository } from '../../src/idempotency/repository.js';
import { validatorCompiler } from '../../src/platform/validation.js';
import { adminTest, createKey, expectError, type TestAdmin } from '../support/admin.js';
import { T0 } from '../support/time.js';

const test = adminTest({ clock: T0 });

let customers = 0;
/** A customer with a balance of `remaining` units, through the API. */
async function customerWith(admin: TestAdmin, remaining: number) {
  const response = await admin.request('POST', '/admin/v1/customers', {
    json: { externalId: `cus_target_${++customers}`, credits: { remaining } },
  });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return response.body as { id: number };
}

const remainingOf = async (admin: TestAdmin, path: string) =>
  ((await admin.request('GET', path)).body as { credits: { remaining: number } }).credits.remaining;

/** The same operation with the same Idempotency-Key on two targets: the second is refused, and changes nothing. */
async function expectBoundToTarget(admin: TestAdmin, first: string, second: string, operation: object, key: string) {
  const headers = { 'idempotency-key': key };
  const done = await admin.request('POST', `${first}/credits`, { json: operation, headers });
  expect(done.status, JSON.stringify(done.body)).toBe(200);
  const secondBefore = await remainingOf(admin, second);

  const elsewhere = await admin.request('POST', `${second}/credits`, { json: operation, headers });
  expectError(elsewhere, 422, 'idempotency_key_mismatch');
  expect(elsewhere.headers.get('idempotent-replayed')).toBeNull();
  expect(await remainingOf(admin, second)).toBe(secondBefore);

  // On its own target the key still replays the first answer.
  const retry = await admin.request('POST', `${first}/credits`, { json: operation, headers });
  expect(retry.headers.get('idempotent-replayed')).toBe('true');
  expect(retry.body).toEqual(done.body);
  return done.body as { remaining: number };
}

describe("an Idempotency-Key belongs to its request's target, not only to its route and body", () => {
  test("a customer's increment: the key sent again for another customer is a 422, never the first customer's balance", async ({
    admin,
  }) => {
    const [one, two] = [await customerWith(admin, 100), await customerWith(admin, 100)];
    const increment = { operation: 'increment', amount: 500 };
    const first = `/admin/v1/customers/${one.id}`;
    const done = await expectBoundToTarget(admin, first, `/admin/v1/customers/${two.id}`, increment, 'invoice-run-1');
    expect(done.remaining).toBe(600);
    expect(await remainingOf(admin, first)).toBe(600);
  });

  test("a key's set: the key sent again for another API key is a 422, and that key's balance is not touched", async ({ admin }) => {
    const one = await createKey(admin, { plan: 'free', credits: { remaining: 100 } });
    const two = await createKey(admin, { plan: 'free', credits: { remaining: 100 } });
    const set = { operation: 'set', amount: 1_000 };
    const done = await expectBoundToTarget(admin, `/admin/v1/keys/${one.id}`, `/admin/v1/keys/${two.id}`, set, 'invoice-run-2');
    expect(done.remaining).toBe(1_000);
  });
});

describe('any idempotent route with parameters in its path', () => {
  test('binds a key to the parameters as validated: another value of any of them is a 422; the same target, however written, replays', async ({
    t,
  }) => {
    const ownerId = (await t.db.query<{ id: number }>('SELECT min(id)::int AS id FROM api_keys'))[0]!.id;
    const app = Fastify();
    app.setValidatorCompiler(validatorCompiler);
    await app.register(idempotency, { retentionHours: 24, keys: createIdempotencyKeysRepository(t.db, 'api'), ownerOf: () => ownerId });
    let runs = 0;
    app.post(
      '/shelves/:shelf/boxes/:box',
      {
        schema: { params: Type.Object({ shelf: Type.Integer(), box: Type.String() }), body: Type.Object({ count: Type.Integer() }) },
        config: { idempotent: true },
      },
      async (request, reply) => {
        const { status, body } = await app.idempotently(request, reply, async () => ({ status: 200, body: { run: ++runs } }));
        return reply.code(status).send(body);
      },
    );
    try {
      const post = (url: string) => app.inject({ method: 'POST', url, headers: { 'idempotency-key': 'generic' }, payload: { count: 1 } });
      expect((await post('/shelves/1/boxes/a')).json()).toEqual({ run: 1 });
      for (const elsewhere of ['/shelves/2/boxes/a', '/shelves/1/boxes/b', '/shelves/1/boxes/a%2Fb']) {
        const response = await post(elsewhere);
        expect(response.statusCode, elsewhere).toBe(422);
        expect(response.json().code).toBe('idempotency_key_mismatch');
      }
      // Escaped or not, it names the same box: a retry.
      const retry = await post('/shelves/1/boxes/%61');
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.json()).toEqual({ run: 1 });
      expect(runs).toBe(1);
    } finally {
      await app.close();
    }
  });
});

describe('keys stored before they were bound to targets', () => {
  /** The digest as it was before: the method, the route's pattern and the body (sorted keys, declared fields). */
  const digestBefore = (text: string) => hash('sha256', text, 'base64url');

  test('a route without parameters has the same digest as before, so its stored answers still replay', async ({ t }) => {
    const created = await t.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...t.auth, 'idempotency-key': 'kept-across-upgrade' },
      payload: { name: 'Kept', categoryId: 1 },
    });
    expect(created.statusCode).toBe(201);
    const stored = (
      await t.db.query<{ request_hash: string }>("SELECT request_hash FROM idempotency_keys WHERE key = 'kept-across-upgrade'")
    )[0]!.request_hash;
    expect(stored).toBe(digestBefore('POST /v1/pets {"categoryId":1,"name":"Kept"}'));
  });

  test("a route with an id: an answer stored before is a 422, whichever target it was for, never replayed as another's", async ({
    t,
    admin,
  }) => {
    const customer = await customerWith(admin, 100);
    const operation = { operation: 'increment', amount: 5 };
    await t.db.query(
      `INSERT INTO admin_idempotency_keys (admin_token_id, key, request_hash, status, body) VALUES ($1, 'stored-before', $2, 200, $3)`,
      [
        admin.write.id,
        digestBefore('POST /admin/v1/customers/:id/credits {"amount":5,"operation":"increment"}'),
        JSON.stringify({ remaining: 9_999, refill: null, refillAt: null }),
      ],
    );
    const path = `/admin/v1/customers/${customer.id}`;
    const response = await admin.request('POST', `${path}/credits`, { json: operation, headers: { 'idempotency-key': 'stored-before' } });
    expectError(response, 422, 'idempotency_key_mismatch');
    expect(await remainingOf(admin, path)).toBe(100);
    // A new key does the operation.
    const fresh = await admin.request('POST', `${path}/credits`, {
      json: operation,
      headers: { 'idempotency-key': 'after' },
    });
    expect(fresh.body).toMatchObject({ remaining: 105 });
  });
});
