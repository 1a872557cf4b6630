import { Ajv, type ValidateFunction } from 'ajv';
import { expect } from 'vitest';
import { insertInFlight, POSTGRES_URL } from '../support/databases.js';
import { appTest } from '../support/fixtures.js';
import type { HttpResponse } from '../support/http.js';
import { SUNSET, T0 } from '../support/time.js';
import { bearer } from '../support/keys.js';
import { minuteAndDay } from '../../src/plans/limits.js';

/** Headers of HTTP itself or of every response alike, which the document does not repeat per operation. */
const GENERAL_HEADERS = new Set([
  'content-type',
  'content-length',
  'date',
  'connection',
  'keep-alive',
  'x-content-type-options',
  'cache-control',
  // CORS (docs/api.md, "Calling from a browser"): on every answer of the listener alike.
  'access-control-allow-origin',
  'access-control-expose-headers',
  'vary',
]);

interface Documented {
  description: string;
  content?: { 'application/json': { schema: object } };
  headers?: Record<string, { schema: { type: 'string' | 'integer' } }>;
}

const ajv = new Ajv({ strict: false, formats: { int64: true } });

/**
 * The app on a clock of the test's, its document, and `call`, which sends a request over HTTP
 * (with no key unless given one) and checks the response against the document as a validating
 * proxy (Prism) would: the operation is documented, so is its status, the body matches the
 * documented schema (no body where none is documented), and every header the service adds is
 * documented for that status, with its documented type. `seen` holds every operation and status
 * called so far.
 */
const test = appTest({ clock: T0, anonymous: true })
  .extend('document', { scope: 'file' }, async ({ request }) => {
    // Tests walk whatever the document holds.
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const document: any = (await request('GET', '/v1/openapi.json')).body;
    return document;
  })
  .extend('seen', { scope: 'file' }, () => new Set<string>())
  .extend('call', { scope: 'file' }, ({ request, document, seen }) => {
    const validators = new Map<object, ValidateFunction>();
    function conforms(method: string, url: string, response: HttpResponse) {
      const path = new URL(url, 'http://x').pathname.replace(/^\/v1/, '');
      const template = Object.keys(document.paths).find((candidate) =>
        new RegExp(`^${candidate.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(path),
      );
      const operation = template && document.paths[template][method.toLowerCase()];
      expect(operation, `${method} ${url} is not a documented operation`).toBeDefined();
      const documented: Documented | undefined = operation.responses[String(response.status)];
      expect(documented, `${method} ${url}: status ${response.status} is not documented`).toBeDefined();
      const schema = documented!.content?.['application/json'].schema;
      if (schema) {
        if (!validators.has(schema)) validators.set(schema, ajv.compile(schema));
        const validate = validators.get(schema)!;
        expect(validate(response.body), `${method} ${url} ${response.status}: ${JSON.stringify(validate.errors)}`).toBe(true);
      } else {
        expect(response.body, `${method} ${url} ${response.status} documents no body`).toBeUndefined();
      }
      for (const [name, value] of response.headers) {
        if (GENERAL_HEADERS.has(name)) continue;
        const header = documented!.headers?.[name];
        expect(header, `${method} ${url} ${response.status}: header ${name} is not documented`).toBeDefined();
        if (header!.schema.type === 'integer') expect(value, `${name} must be an integer`).toMatch(/^-?\d+$/);
      }
      seen.add(`${method} ${template} ${response.status}`);
    }
    return async (method: string, url: string, options: Parameters<typeof request>[2] = {}) => {
      const response = await request(method, url, options);
      conforms(method, url, response);
      return response;
    };
  });

test('live traffic over HTTP, every status of every operation, conforms to the OpenAPI document', async ({ t, call, seen, clock }) => {
  const auth = t.auth;
  const newPet = { name: 'Contract', categoryId: 1, status: 'available' };
  const created = await call('POST', '/v1/pets', { json: newPet, headers: { ...auth, 'idempotency-key': 'contract-1' } });
  await call('POST', '/v1/pets', { json: newPet, headers: { ...auth, 'idempotency-key': 'contract-1' } });
  await call('POST', '/v1/pets', { json: { ...newPet, categoryId: 2 }, headers: { ...auth, 'idempotency-key': 'contract-1' } });
  await call('POST', '/v1/pets', { json: { name: 'No status', categoryId: 1 }, headers: auth });
  await call('POST', '/v1/pets', { json: { name: '' }, headers: auth });
  await call('POST', '/v1/pets', { json: newPet, headers: { ...auth, 'idempotency-key': 'a b' } });
  await call('POST', '/v1/pets', {
    body: JSON.stringify({ ...newPet, name: 'x'.repeat(20_000) }),
    headers: { ...auth, 'content-type': 'application/json' },
  });
  await call('POST', '/v1/pets', { body: 'Rex', headers: { ...auth, 'content-type': 'text/plain' } });
  await call('POST', '/v1/pets', { json: newPet });
  const { key: readOnly } = await t.app.apiKeysRepository.create({ plan: 'free', readOnly: true });
  await call('POST', '/v1/pets', { json: newPet, headers: bearer(readOnly) });

  const list = await call('GET', '/v1/pets?limit=1', { headers: auth });
  await call('GET', '/v1/pets?limit=1', { headers: { ...auth, 'if-none-match': list.headers.get('etag')! } });
  await call('GET', '/v1/pets?status=sold', { headers: auth });
  await call('GET', '/v1/pets?limit=0', { headers: auth });
  await call('GET', '/v1/pets', { headers: { authorization: 'Bearer psk_not_a_key' } });
  const pet = await call('GET', `/v1/pets/${created.body.id}`, { headers: auth });
  await call('GET', `/v1/pets/${created.body.id}`, { headers: { ...auth, 'if-none-match': pet.headers.get('etag')! } });
  await call('GET', '/v1/pets/999999', { headers: auth });
  await call('GET', '/v1/pets/abc', { headers: auth });
  await call('GET', '/v1/pets/1');

  const { key: limited } = await t.app.apiKeysRepository.create({ plan: 'enterprise', limits: minuteAndDay(1, 10) });
  for (const path of ['/v1/pets', '/v1/pets', '/v1/pets/1']) await call('GET', path, { headers: bearer(limited) });
  await call('POST', '/v1/pets', { json: newPet, headers: bearer(limited) });

  clock.set(SUNSET);
  await call('GET', '/v1/pets/1', { headers: auth });
  clock.set(T0);

  // The key's own usage: free, with a limit of its own per key (the 61st read of a minute is refused).
  const range = `start=${new Date(T0).toISOString()}&end=${new Date(T0 + 3_600_000).toISOString()}`;
  const usage = await call('GET', `/v1/usage?${range}&groupBy=operation`, { headers: auth });
  await call('GET', `/v1/usage?${range}&groupBy=operation`, { headers: { ...auth, 'if-none-match': usage.headers.get('etag')! } });
  await call('GET', `/v1/usage?${range}&scope=customer`, { headers: auth });
  await call('GET', `/v1/usage?${range}`);
  for (let read = 0; read < 58; read++) await call('GET', `/v1/usage?${range}`, { headers: auth });
  await call('GET', `/v1/usage?${range}`, { headers: auth });

  const expected = [
    'POST /pets 201',
    'POST /pets 400',
    'POST /pets 401',
    'POST /pets 403',
    'POST /pets 413',
    'POST /pets 415',
    'POST /pets 422',
    'POST /pets 429',
    'GET /pets 200',
    'GET /pets 304',
    'GET /pets 400',
    'GET /pets 401',
    'GET /pets 429',
    'GET /pets/{petId} 200',
    'GET /pets/{petId} 304',
    'GET /pets/{petId} 400',
    'GET /pets/{petId} 401',
    'GET /pets/{petId} 404',
    'GET /pets/{petId} 410',
    'GET /pets/{petId} 429',
    'GET /usage 200',
    'GET /usage 304',
    'GET /usage 400',
    'GET /usage 401',
    'GET /usage 429',
  ];
  expect([...seen].sort()).toEqual(expect.arrayContaining(expected));
});

test.skipIf(!POSTGRES_URL)('a 409 for an Idempotency-Key in flight conforms too', async ({ t, call }) => {
  await t.db.query(`CREATE FUNCTION slow_contract() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF NEW.name = 'Slow contract' THEN PERFORM pg_sleep(0.5); END IF; RETURN NEW; END $$`);
  await t.db.query('CREATE TRIGGER slow_contract BEFORE INSERT ON pets FOR EACH ROW EXECUTE FUNCTION slow_contract()');
  try {
    const headers = { ...t.auth, 'idempotency-key': 'contract-in-flight' };
    const first = call('POST', '/v1/pets', { json: { name: 'Slow contract', categoryId: 1 }, headers });
    await insertInFlight(t.db);
    const during = await call('POST', '/v1/pets', {
      json: { name: 'Slow contract', categoryId: 1 },
      headers: { ...headers, origin: 'https://shop.example.com' },
    });
    expect(during.status).toBe(409);
    // A page reads it too (CORS_ORIGINS: any origin; test/platform/http/cors.test.ts has the other statuses).
    expect(during.headers.get('access-control-allow-origin')).toBe('*');
    expect((await first).status).toBe(201);
  } finally {
    await t.db.query('DROP TRIGGER slow_contract ON pets');
    await t.db.query('DROP FUNCTION slow_contract()');
  }
});
