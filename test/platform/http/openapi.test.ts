import { existsSync } from 'node:fs';
import SwaggerParser from '@apidevtools/swagger-parser';
import { Ajv } from 'ajv';
import { describe, expect } from 'vitest';
import { usageThreshold } from '../../../src/webhooks/events.js';
import { createWebhookDeliveriesRepository } from '../../../src/webhooks/repository.js';
import { adminFixture } from '../../support/admin.js';
import { appTest } from '../../support/fixtures.js';

/** The app, and the document it serves, read once for the file; the admin listener and its own document likewise. */
const test = appTest()
  .extend('document', { scope: 'file' }, async ({ t }) => {
    const response = await t.app.inject('/v1/openapi.json');
    expect(response.statusCode).toBe(200);
    // Tests walk whatever the document holds.
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return response.json<any>();
  })
  .extend('admin', { scope: 'file' }, adminFixture)
  .extend('adminDocument', { scope: 'file' }, async ({ admin }) => {
    const response = await admin.server.inject('/admin/v1/openapi.json');
    expect(response.statusCode).toBe(200);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return response.json<any>();
  });

/** Checks bodies against schemas of a document, as a client generated from it would read them. */
function checker() {
  const ajv = new Ajv({ strict: false });
  return (schema: object, body: unknown) => {
    const validate = ajv.compile(schema);
    expect(validate(body), JSON.stringify(validate.errors)).toBe(true);
  };
}

describe('the OpenAPI document at /v1/openapi.json', () => {
  test('is a valid OpenAPI 3 document', async ({ document }) => {
    await SwaggerParser.validate(structuredClone(document));
    expect(document.openapi).toMatch(/^3\./);
    expect(document.servers).toEqual([{ url: 'https://api.example.test/v1' }]);
  });

  test("lists the interface's three operations, the quota lookup and the usage read relative to the base URL, and nothing else", ({
    document,
  }) => {
    expect(Object.keys(document.paths).sort()).toEqual(['/pets', '/pets/{petId}', '/rate_limit', '/usage']);
    expect(document.paths['/rate_limit'].get.operationId).toBe('getRateLimit');
    expect(document.paths['/usage'].get.operationId).toBe('getUsage');
    expect(document.paths['/usage'].get.tags).toEqual(['usage']);
    // A key's own rows: the admin API's row, never per key.
    expect(Object.keys(document.paths['/usage'].get.responses[200].content['application/json'].schema.items.properties)).toEqual([
      'start',
      'operation',
      'requests',
      'units',
      'refused',
    ]);
    expect(
      document.paths['/rate_limit'].get.responses[200].content['application/json'].schema.properties.concurrency.properties.limit,
    ).toEqual({
      type: 'integer',
      nullable: true,
      description: 'Requests the key may have in flight at once; null when it has no such limit',
    });
    expect(document.paths['/pets'].get.operationId).toBe('listPets');
    expect(document.paths['/pets'].post.operationId).toBe('createPet');
    expect(document.paths['/pets/{petId}'].get.operationId).toBe('getPet');
  });

  test('marks getPet deprecated with its sunset', ({ document }) => {
    const getPet = document.paths['/pets/{petId}'].get;
    expect(getPet.deprecated).toBe(true);
    expect(getPet.description).toContain('05 Dec 2030');
  });

  test('documents the error responses with the Error shape', ({ document }) => {
    const createPet = document.paths['/pets'].post;
    for (const status of ['400', '413', '415']) {
      const schema = createPet.responses[status].content['application/json'].schema;
      expect(schema.required).toEqual(['code', 'message', 'status']);
    }
    expect(document.paths['/pets/{petId}'].get.responses['404']).toBeDefined();
  });

  test('describes real responses: each one validates against its documented schema', async ({ t, document }) => {
    const schemaOf = (path: string, method: string, status: number) =>
      document.paths[path][method].responses[String(status)].content['application/json'].schema;
    const check = checker();

    const created = await t.app.inject({
      method: 'POST',
      url: '/v1/pets',
      payload: { name: 'Doc', categoryId: 2, status: 'sold' },
      headers: t.auth,
    });
    check(schemaOf('/pets', 'post', 201), created.json());
    const bare = await t.app.inject({ method: 'POST', url: '/v1/pets', payload: { name: 'No status', categoryId: 2 }, headers: t.auth });
    check(schemaOf('/pets', 'post', 201), bare.json());
    check(schemaOf('/pets', 'post', 400), (await t.app.inject({ method: 'POST', url: '/v1/pets', payload: {}, headers: t.auth })).json());
    check(schemaOf('/pets', 'get', 200), (await t.app.inject({ url: '/v1/pets', headers: t.auth })).json());
    check(schemaOf('/pets', 'get', 400), (await t.app.inject({ url: '/v1/pets?limit=0', headers: t.auth })).json());
    check(schemaOf('/pets/{petId}', 'get', 200), (await t.app.inject({ url: `/v1/pets/${created.json().id}`, headers: t.auth })).json());
    check(schemaOf('/pets/{petId}', 'get', 404), (await t.app.inject({ url: '/v1/pets/999999', headers: t.auth })).json());
  });

  test('serves interactive docs at /docs, titled for the service, keeping the key across reloads', async ({ t }) => {
    const response = await t.app.inject('/docs/');
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/text\/html/);
    expect(response.body).toContain('<title>Pet store</title>');
    const { info } = (await t.app.inject('/v1/openapi.json')).json<{ info: { description: string } }>();
    for (const guide of ['docs/api.md', 'docs/api-keys.md', 'docs/decisions/', 'client/README.md']) {
      expect(info.description).toContain(guide);
      expect(existsSync(guide), guide).toBe(true);
    }
    const initializer = await t.app.inject('/docs/static/swagger-initializer.js');
    expect(initializer.body).toMatch(/"persistAuthorization":\s*true/);
  });
});

test('states the interface: its parameters, required fields and limits', ({ document }) => {
  const parameter = (path: string, method: string, name: string) =>
    document.paths[path][method].parameters.find((candidate: { name: string }) => candidate.name === name);
  expect(parameter('/pets', 'get', 'limit')).toMatchObject({
    in: 'query',
    required: false,
    schema: { type: 'integer', minimum: 1, maximum: 100, default: 20 },
  });
  expect(parameter('/pets', 'get', 'status')).toMatchObject({ in: 'query', required: false });
  expect(parameter('/pets', 'get', 'status').schema.anyOf.map((option: { enum: string[] }) => option.enum[0])).toEqual([
    'available',
    'pending',
    'sold',
  ]);
  expect(parameter('/pets/{petId}', 'get', 'petId')).toMatchObject({
    in: 'path',
    required: true,
    schema: { type: 'integer', format: 'int64' },
  });

  const newPet = document.paths['/pets'].post.requestBody;
  expect(newPet.required).toBe(true);
  const newPetSchema = newPet.content['application/json'].schema;
  expect(newPetSchema.required).toEqual(['name', 'categoryId']);
  expect(newPetSchema.properties.categoryId).toMatchObject({ type: 'integer', format: 'int64' });
  const pet = document.paths['/pets/{petId}'].get.responses['200'].content['application/json'].schema;
  expect(pet.required).toEqual(['id', 'name', 'categoryId']);
  expect(pet.properties.id).toMatchObject({ type: 'integer', format: 'int64' });
});

test('describes every response of every operation, in both documents', ({ document, adminDocument }) => {
  for (const described of [document, adminDocument]) {
    for (const [path, operations] of Object.entries<Record<string, { responses: Record<string, { description: string }> }>>(
      described.paths,
    )) {
      for (const [method, operation] of Object.entries(operations)) {
        for (const [status, response] of Object.entries(operation.responses)) {
          expect(response.description, `${method} ${path} ${status}`).not.toBe('Default Response');
        }
      }
    }
  }
});

test('documents on every operation, in both documents, the 500 and the 503 with Retry-After that any may answer', ({
  document,
  adminDocument,
}) => {
  for (const described of [document, adminDocument]) {
    type Documented = { content?: { 'application/json': { schema: { required?: string[] } } }; headers?: Record<string, unknown> };
    for (const [path, operations] of Object.entries<Record<string, { responses: Record<string, Documented | undefined> }>>(
      described.paths,
    )) {
      for (const [method, { responses }] of Object.entries(operations)) {
        for (const status of ['500', '503']) {
          expect(responses[status]?.content?.['application/json'].schema.required, `${method} ${path} ${status}`).toEqual([
            'code',
            'message',
            'status',
          ]);
        }
        expect(responses['503']?.headers?.['retry-after'], `${method} ${path}`).toBeDefined();
      }
    }
  }
});

test('makes no page size required: limit is optional with its default in the admin document too', ({ adminDocument }) => {
  for (const path of ['/keys', '/audit']) {
    const limit = adminDocument.paths[path].get.parameters.find((candidate: { name: string }) => candidate.name === 'limit');
    expect(limit).toMatchObject({ required: false, schema: { default: 20, minimum: 1, maximum: 100 } });
  }
});

test('documents the deprecation headers on every response of getPet', ({ document }) => {
  const responses = document.paths['/pets/{petId}'].get.responses;
  for (const status of ['200', '400', '404', '410']) {
    expect(Object.keys(responses[status].headers)).toEqual(expect.arrayContaining(['deprecation', 'sunset', 'link']));
  }
});

test('requires bearer auth on every operation and documents the 401 with its header', ({ document }) => {
  expect(document.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
  for (const [path, method] of [
    ['/pets', 'get'],
    ['/pets', 'post'],
    ['/pets/{petId}', 'get'],
  ] as const) {
    const operation = document.paths[path][method];
    expect(operation.security).toEqual([{ bearerAuth: [] }]);
    expect(operation.responses['401'].headers['www-authenticate']).toBeDefined();
    expect(operation.responses['401'].content['application/json'].schema.required).toEqual(['code', 'message', 'status']);
  }
});

test('documents the rate-limit headers on every response, and the 429 with Retry-After', ({ document }) => {
  for (const [path, method] of [
    ['/pets', 'get'],
    ['/pets', 'post'],
    ['/pets/{petId}', 'get'],
  ] as const) {
    const { responses } = document.paths[path][method];
    expect(responses['429'].headers['retry-after']).toBeDefined();
    for (const [status, response] of Object.entries<{ headers: object }>(responses)) {
      expect(Object.keys(response.headers), `${method} ${path} ${status}`).toEqual(
        expect.arrayContaining(['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'ratelimit-policy', 'ratelimit']),
      );
    }
  }
  const getPet = document.paths['/pets/{petId}'].get.responses;
  for (const status of ['401', '429']) expect(getPet[status].headers.sunset).toBeDefined();
});

test('documents Idempotency-Key on createPet, with how long keys are kept, the replay header, 409 and 422', ({ document }) => {
  const createPet = document.paths['/pets'].post;
  const parameter = createPet.parameters.find((one: { name: string }) => one.name === 'idempotency-key');
  expect(parameter).toMatchObject({ in: 'header', required: false, schema: { type: 'string' } });
  expect(parameter.description).toContain('Keys are kept for 24 hours');
  expect(createPet.responses['201'].headers['idempotent-replayed']).toBeDefined();
  expect(createPet.responses['409'].headers['retry-after']).toBeDefined();
  for (const status of ['409', '422']) {
    expect(createPet.responses[status].content['application/json'].schema.required).toEqual(['code', 'message', 'status']);
  }
  expect(createPet.responses['409'].description).toContain('idempotency_key_in_use');
  expect(createPet.responses['422'].description).toContain('idempotency_key_mismatch');
});

test('documents conditional reads: If-None-Match, the ETag and Cache-Control of a 200, and the 304 with no body', ({ document }) => {
  for (const path of ['/pets', '/pets/{petId}']) {
    const operation = document.paths[path].get;
    expect(operation.parameters.find((one: { name: string }) => one.name === 'if-none-match')).toMatchObject({
      in: 'header',
      required: false,
    });
    expect(Object.keys(operation.responses['200'].headers)).toEqual(expect.arrayContaining(['etag', 'cache-control']));
    const notModified = operation.responses['304'];
    expect(notModified.content).toBeUndefined();
    expect(Object.keys(notModified.headers)).toEqual(expect.arrayContaining(['etag', 'cache-control', 'x-ratelimit-remaining']));
  }
  expect(document.paths['/pets'].post.parameters.some((one: { name: string }) => one.name === 'if-none-match')).toBe(false);
});

describe('the admin OpenAPI document at /admin/v1/openapi.json, on the admin listener', () => {
  const ADMIN_OPERATIONS = [
    ['/keys', 'post', 'createKey', true],
    ['/keys', 'get', 'listKeys', false],
    ['/keys/{id}', 'get', 'getKey', false],
    ['/keys/{id}', 'patch', 'changeKey', true],
    ['/keys/{id}/rotate', 'post', 'rotateKey', true],
    ['/keys/{id}/revoke', 'post', 'revokeKey', true],
    ['/keys/{id}/credits', 'post', 'changeKeyCredits', true],
    ['/customers', 'post', 'createCustomer', true],
    ['/customers', 'get', 'listCustomers', false],
    ['/customers/{id}', 'get', 'getCustomer', false],
    ['/customers/{id}', 'patch', 'changeCustomer', true],
    ['/customers/{id}/credits', 'post', 'changeCustomerCredits', true],
    ['/plans', 'post', 'createPlan', true],
    ['/plans', 'get', 'listPlans', false],
    ['/plans/{name}', 'get', 'getPlan', false],
    ['/plans/{name}', 'patch', 'changePlan', true],
    ['/plans/{name}', 'delete', 'deletePlan', true],
    ['/keys/{id}/usage', 'get', 'getKeyUsage', false],
    ['/keys/{id}/ban', 'delete', 'liftKeyBan', true],
    ['/usage', 'get', 'getUsage', false],
    ['/usage/exports', 'post', 'exportUsage', true],
    ['/address-bans', 'get', 'listAddressBans', false],
    ['/address-bans/{address}', 'delete', 'liftAddressBan', true],
    ['/webhook-deliveries', 'get', 'listWebhookDeliveries', false],
    ['/webhook-deliveries/{id}/retry', 'post', 'retryWebhookDelivery', true],
    ['/audit', 'get', 'listAudit', false],
  ] as const;

  test('is a valid OpenAPI 3 document of the admin operations only, relative to /admin/v1', async ({ adminDocument }) => {
    await SwaggerParser.validate(structuredClone(adminDocument));
    expect(adminDocument.servers).toEqual([{ url: '/admin/v1' }]);
    expect(Object.keys(adminDocument.paths).sort()).toEqual([...new Set(ADMIN_OPERATIONS.map(([path]) => path))].sort());
    for (const [path, method, operationId] of ADMIN_OPERATIONS) expect(adminDocument.paths[path][method].operationId).toBe(operationId);
  });

  test('requires an admin token everywhere: 401 on every operation, 403 on those that change keys, Idempotency-Key on the create; X-Request-Id on every response', ({
    adminDocument,
  }) => {
    expect(adminDocument.components.securitySchemes.adminToken).toMatchObject({ type: 'http', scheme: 'bearer' });
    for (const [path, method, , writes] of ADMIN_OPERATIONS) {
      const operation = adminDocument.paths[path][method];
      expect(operation.security).toEqual([{ adminToken: [] }]);
      expect(operation.responses['401'].headers['www-authenticate']).toBeDefined();
      expect(Boolean(operation.responses['403']), `${method} ${path}`).toBe(writes);
      for (const [status, response] of Object.entries<{ headers: object }>(operation.responses)) {
        expect(Object.keys(response.headers), `${method} ${path} ${status}`).toContain('x-request-id');
      }
    }
    const create = adminDocument.paths['/keys'].post;
    expect(create.parameters.find((one: { name: string }) => one.name === 'idempotency-key')).toMatchObject({ in: 'header' });
    expect(Object.keys(create.responses)).toEqual(expect.arrayContaining(['201', '400', '409', '422']));
    const createCustomer = adminDocument.paths['/customers'].post;
    expect(createCustomer.parameters.find((one: { name: string }) => one.name === 'idempotency-key')).toMatchObject({ in: 'header' });
  });

  test('describes real responses: each one validates against its documented schema', async ({ t, admin, adminDocument }) => {
    const check = checker();
    const schemaOf = (path: string, method: string, status: number) =>
      adminDocument.paths[path][method].responses[String(status)].content['application/json'].schema;
    const created = await admin.request('POST', '/admin/v1/keys', { json: { plan: 'enterprise', perMinute: 5, perDay: 50 } });
    check(schemaOf('/keys', 'post', 201), created.body);
    const { id } = created.body;
    check(schemaOf('/keys', 'post', 400), (await admin.request('POST', '/admin/v1/keys', { json: {} })).body);
    check(schemaOf('/keys', 'get', 200), (await admin.request('GET', '/admin/v1/keys')).body);
    check(schemaOf('/keys/{id}', 'get', 200), (await admin.request('GET', `/admin/v1/keys/${id}`)).body);
    check(schemaOf('/keys/{id}', 'get', 404), (await admin.request('GET', '/admin/v1/keys/999999')).body);
    check(schemaOf('/keys/{id}', 'patch', 200), (await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { perDay: 60 } })).body);
    check(schemaOf('/keys/{id}/usage', 'get', 200), (await admin.request('GET', `/admin/v1/keys/${id}/usage`)).body);
    const rotated = await admin.request('POST', `/admin/v1/keys/${id}/rotate`, { json: { overlapSeconds: 0 } });
    check(schemaOf('/keys/{id}/rotate', 'post', 201), rotated.body);
    check(schemaOf('/keys/{id}/revoke', 'post', 200), (await admin.request('POST', `/admin/v1/keys/${id}/revoke`)).body);
    check(schemaOf('/keys/{id}', 'patch', 409), (await admin.request('PATCH', `/admin/v1/keys/${id}`, { json: { perDay: 70 } })).body);
    check(
      schemaOf('/keys/{id}', 'patch', 403),
      (
        await admin.request('PATCH', `/admin/v1/keys/${id}`, {
          json: { perDay: 70 },
          headers: { authorization: `Bearer ${admin.read.token}` },
        })
      ).body,
    );
    const customer = await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_documented', name: 'Documented' } });
    check(schemaOf('/customers', 'post', 201), customer.body);
    check(
      schemaOf('/customers', 'post', 409),
      (await admin.request('POST', '/admin/v1/customers', { json: { externalId: 'cus_documented' } })).body,
    );
    check(schemaOf('/customers', 'get', 200), (await admin.request('GET', '/admin/v1/customers')).body);
    check(schemaOf('/customers/{id}', 'get', 200), (await admin.request('GET', `/admin/v1/customers/${customer.body.id}`)).body);
    check(schemaOf('/customers/{id}', 'get', 404), (await admin.request('GET', '/admin/v1/customers/999999')).body);
    check(
      schemaOf('/customers/{id}', 'patch', 200),
      (await admin.request('PATCH', `/admin/v1/customers/${customer.body.id}`, { json: { name: 'Renamed' } })).body,
    );
    const plan = await admin.request('POST', '/admin/v1/plans', {
      json: { name: 'documented', limits: [{ name: 'second', limit: 5, windowSeconds: 1, algorithm: 'sliding' }] },
    });
    check(schemaOf('/plans', 'post', 201), plan.body);
    check(schemaOf('/plans', 'post', 409), (await admin.request('POST', '/admin/v1/plans', { json: { name: 'free', limits: null } })).body);
    check(schemaOf('/plans', 'get', 200), (await admin.request('GET', '/admin/v1/plans')).body);
    check(schemaOf('/plans/{name}', 'get', 200), (await admin.request('GET', '/admin/v1/plans/enterprise')).body);
    check(schemaOf('/plans/{name}', 'get', 404), (await admin.request('GET', '/admin/v1/plans/nosuch')).body);
    check(
      schemaOf('/plans/{name}', 'patch', 200),
      (await admin.request('PATCH', '/admin/v1/plans/documented', { json: { concurrency: 3, shadow: true } })).body,
    );
    check(
      schemaOf('/plans/{name}', 'patch', 400),
      (await admin.request('PATCH', '/admin/v1/plans/documented', { json: { limits: [] } })).body,
    );
    check(schemaOf('/plans/{name}', 'delete', 409), (await admin.request('DELETE', '/admin/v1/plans/enterprise')).body);
    expect((await admin.request('DELETE', '/admin/v1/plans/documented')).status).toBe(204);
    // The usage record of the app's own key, whose requests this file sent: its hour, by operation.
    await t.app.usage.flush();
    const hour = Math.floor(t.app.now() / 3_600_000) * 3_600_000;
    const window = `start=${new Date(hour).toISOString()}&end=${new Date(hour + 3_600_000).toISOString()}`;
    const appKeyId = (await t.app.db.query<{ id: number }>('SELECT min(id)::int AS id FROM api_keys'))[0]!.id;
    const usage = await admin.request('GET', `/admin/v1/usage?keyId=${appKeyId}&${window}&groupBy=operation`);
    expect(usage.body.length).toBeGreaterThan(0);
    check(schemaOf('/usage', 'get', 200), usage.body);
    check(schemaOf('/usage', 'get', 400), (await admin.request('GET', `/admin/v1/usage?${window}`)).body);
    const range = { start: new Date(hour).toISOString(), end: new Date(hour + 3_600_000).toISOString() };
    // This app exports no usage (USAGE_EXPORT off): a backfill is its 409; test/usage/export.test.ts checks the 202 and the 400s.
    check(schemaOf('/usage/exports', 'post', 409), (await admin.request('POST', '/admin/v1/usage/exports', { json: range })).body);
    // A usage event recorded as the rate limiter's watcher would (this app has no WEBHOOK_URL, so it stays pending).
    const crossing = {
      key: created.body,
      window: 'minute',
      windowStart: t.app.now() - 60_000,
      limit: 5,
      used: 4,
      threshold: 80,
      resetAt: t.app.now(),
    } as const;
    await createWebhookDeliveriesRepository(t.app.db).record(usageThreshold(crossing, t.app.now()));
    const deliveries = await admin.request('GET', '/admin/v1/webhook-deliveries?state=pending');
    expect(deliveries.body).toHaveLength(1);
    check(schemaOf('/webhook-deliveries', 'get', 200), deliveries.body);
    const retried = await admin.request('POST', `/admin/v1/webhook-deliveries/${deliveries.body[0].id}/retry`);
    check(schemaOf('/webhook-deliveries/{id}/retry', 'post', 200), retried.body);
    check(
      schemaOf('/webhook-deliveries/{id}/retry', 'post', 404),
      (await admin.request('POST', '/admin/v1/webhook-deliveries/999999/retry')).body,
    );
    check(schemaOf('/audit', 'get', 200), (await admin.request('GET', '/admin/v1/audit')).body);
    check(schemaOf('/audit', 'get', 401), (await admin.request('GET', '/admin/v1/audit', { headers: { authorization: '' } })).body);
  });

  test('serves its docs page at /docs', async ({ admin }) => {
    const response = await admin.server.inject('/docs/');
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/text\/html/);
  });
});

describe('both OpenAPI documents', () => {
  // What callers generate clients from: a refactoring changes neither by a byte. A deliberate
  // change of the interface updates the recorded file (vitest -u) in the same commit.
  test('are byte for byte the documents recorded in test/platform/http/openapi/', async ({ t, admin }) => {
    const served = await t.app.inject('/v1/openapi.json');
    await expect(served.body).toMatchFileSnapshot('openapi/v1.json');
    const adminServed = await admin.server.inject('/admin/v1/openapi.json');
    await expect(adminServed.body).toMatchFileSnapshot('openapi/admin.json');
  });
});
