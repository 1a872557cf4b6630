import { describe, expect } from 'vitest';
import { adminTest, createKey } from '../../support/admin.js';
import { describeAppTest } from '../../support/fixtures.js';
import { bearer } from '../../support/keys.js';
import { minuteAndDay } from '../../../src/plans/limits.js';

const PAGE = 'http://localhost:5173';
const preflight = (method: string, headers = 'authorization, content-type, idempotency-key') => ({
  origin: PAGE,
  'access-control-request-method': method,
  'access-control-request-headers': headers,
});

/** Every response header the /v1 document names, read from the document a caller reads. */
function documentedHeaders(document: { paths: Record<string, Record<string, { responses: Record<string, { headers?: object }> }>> }) {
  const names = Object.values(document.paths).flatMap((operations) =>
    Object.values(operations).flatMap((operation) =>
      Object.values(operation.responses).flatMap((response) => Object.keys(response.headers ?? {})),
    ),
  );
  return [...new Set(names.map((name) => name.toLowerCase()))];
}

const exposedOf = (headers: Headers) => (headers.get('access-control-expose-headers') ?? '').split(/,\s*/).filter(Boolean);

// CORS_ORIGINS unset: any origin. An app for the file, with the admin listener.
const test = adminTest();

describe('CORS_ORIGINS unset: any origin', () => {
  test('a preflight is a 204 naming the path’s methods, the headers a page may send and how long to keep it, without credentials', async ({
    request,
  }) => {
    const pets = await request('OPTIONS', '/v1/pets', { headers: preflight('POST') });
    expect(pets.status).toBe(204);
    expect(pets.headers.get('access-control-allow-origin')).toBe('*');
    expect(pets.headers.get('access-control-allow-methods')?.split(', ').sort()).toEqual(['GET', 'HEAD', 'POST']);
    const allowed = pets.headers.get('access-control-allow-headers')!.toLowerCase().split(', ');
    expect(allowed).toEqual(
      expect.arrayContaining(['authorization', 'content-type', 'idempotency-key', 'if-none-match', 'if-match', 'traceparent']),
    );
    expect(Number(pets.headers.get('access-control-max-age'))).toBeGreaterThanOrEqual(600);
    expect(pets.headers.get('access-control-allow-credentials')).toBeNull();
    // The same for every origin, but not for a request without one.
    expect(pets.headers.get('vary')).toMatch(/\borigin\b/i);

    const pet = await request('OPTIONS', '/v1/pets/7', { headers: preflight('GET') });
    expect(pet.status).toBe(204);
    expect(pet.headers.get('access-control-allow-methods')?.split(', ').sort()).toEqual(['GET', 'HEAD']);
  });

  test('50 preflights cost the key nothing and count nothing against anyone', async ({ request }) => {
    const before = await request('GET', '/v1/pets?limit=1');
    const remaining = Number(before.headers.get('x-ratelimit-remaining'));
    // Preflights never carry credentials: without a key, each would otherwise count against the address.
    const answers = await Promise.all(Array.from({ length: 50 }, () => request('OPTIONS', '/v1/pets', { headers: preflight('POST') })));
    expect(answers.map((answer) => answer.status)).toEqual(Array(50).fill(204));
    expect(answers.every((answer) => answer.headers.get('x-ratelimit-remaining') === null)).toBe(true);
    const after = await request('GET', '/v1/pets?limit=1');
    expect(Number(after.headers.get('x-ratelimit-remaining'))).toBe(remaining - 1);
    const anonymous = await request('GET', '/v1/pets', { headers: { authorization: '' } });
    expect(anonymous.status).toBe(401);
    // The address's own window: only this one refusal in it.
    expect(Number(anonymous.headers.get('x-ratelimit-remaining'))).toBe(Number(anonymous.headers.get('x-ratelimit-limit')) - 1);
  });

  test('every answer, of every status, names the origin and exposes every header the /v1 document names', async ({ request, admin }) => {
    const documented = documentedHeaders((await request('GET', '/v1/openapi.json')).body);
    const named = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'ratelimit', 'ratelimit-policy', 'retry-after'];
    named.push('etag', 'link', 'location', 'x-request-id', 'deprecation', 'sunset', 'idempotent-replayed');
    expect(documented).toEqual(expect.arrayContaining(named));

    const readOnly = await createKey(admin, { plan: 'free', readOnly: true });
    const tiny = await createKey(admin, { plan: 'free', limits: minuteAndDay(1, 100) });
    const pet = { name: 'Rex', categoryId: 1, status: 'available' };
    const created = await request('POST', '/v1/pets', { json: pet, headers: { origin: PAGE, 'idempotency-key': 'cors-1' } });
    const listed = await request('GET', '/v1/pets?limit=1', { headers: { origin: PAGE } });
    const answers = {
      200: listed,
      201: created,
      304: await request('GET', '/v1/pets?limit=1', { headers: { origin: PAGE, 'if-none-match': listed.headers.get('etag')! } }),
      400: await request('GET', '/v1/pets/abc', { headers: { origin: PAGE } }),
      401: await request('GET', '/v1/pets', { headers: { origin: PAGE, authorization: 'Bearer nope' } }),
      403: await request('POST', '/v1/pets', { json: pet, headers: { origin: PAGE, ...bearer(readOnly.key) } }),
      404: await request('GET', '/v1/pets/999999', { headers: { origin: PAGE } }),
      413: await request('POST', '/v1/pets', { json: { ...pet, name: 'x'.repeat(20_000) }, headers: { origin: PAGE } }),
      415: await request('POST', '/v1/pets', { body: 'name=Rex', headers: { origin: PAGE, 'content-type': 'text/plain' } }),
      422: await request('POST', '/v1/pets', { json: { ...pet, name: 'Max' }, headers: { origin: PAGE, 'idempotency-key': 'cors-1' } }),
      429: await (async () => {
        await request('GET', '/v1/pets', { headers: bearer(tiny.key) });
        return request('GET', '/v1/pets', { headers: { origin: PAGE, ...bearer(tiny.key) } });
      })(),
    };
    for (const [status, answer] of Object.entries(answers)) {
      expect(answer.status, `${status}: ${JSON.stringify(answer.body)}`).toBe(Number(status));
      expect(answer.headers.get('access-control-allow-origin'), status).toBe('*');
      expect(exposedOf(answer.headers).sort(), status).toEqual([...documented].sort());
    }
    expect(answers[429].headers.get('retry-after')).toMatch(/^\d+$/);
  });

  test('a request without Origin, no browser’s cross-origin call, gets no CORS header, only Vary: Origin', async ({ request }) => {
    const listed = await request('GET', '/v1/pets');
    expect(listed.status).toBe(200);
    expect([...listed.headers.keys()].filter((name) => name.startsWith('access-control-'))).toEqual([]);
    expect(listed.headers.get('vary')).toMatch(/\borigin\b/i);
    // Without Origin an OPTIONS is no preflight: the path's other methods' 405, through the API.
    const asked = await request('OPTIONS', '/v1/pets');
    expect(asked.status).toBe(405);
    expect(asked.headers.get('x-ratelimit-limit')).not.toBeNull();
  });

  test('the admin listener answers no CORS at all', async ({ admin }) => {
    const asked = await admin.request('OPTIONS', '/admin/v1/keys', { headers: preflight('POST') });
    expect(asked.status).toBe(405);
    const listed = await admin.request('GET', '/admin/v1/keys', { headers: { origin: PAGE } });
    expect(listed.status).toBe(200);
    for (const answer of [asked, listed]) {
      expect([...answer.headers.keys()].filter((name) => name.startsWith('access-control-'))).toEqual([]);
    }
  });
});

describe('CORS_ORIGINS listing origins', () => {
  const listed = describeAppTest({ env: { CORS_ORIGINS: `${PAGE}, https://shop.example.com`, LOG_LEVEL: 'debug' } });

  listed(
    'a listed origin is named back, varying on Origin; another gets no Access-Control-Allow-Origin, logged at debug only',
    async ({ t, request }) => {
      const shop = await request('GET', '/v1/pets', { headers: { origin: 'https://shop.example.com' } });
      expect(shop.status).toBe(200);
      expect(shop.headers.get('access-control-allow-origin')).toBe('https://shop.example.com');
      expect(shop.headers.get('vary')).toMatch(/origin/i);
      expect(exposedOf(shop.headers)).toContain('x-ratelimit-remaining');

      const asked = await request('OPTIONS', '/v1/pets', { headers: { ...preflight('POST'), origin: 'https://evil.example' } });
      expect(asked.status).toBe(204);
      expect(asked.headers.get('access-control-allow-origin')).toBeNull();
      const read = await request('GET', '/v1/pets', { headers: { origin: 'https://evil.example' } });
      expect(read.headers.get('access-control-allow-origin')).toBeNull();

      const lines = t.logs.entries().filter((entry) => entry.origin === 'https://evil.example');
      expect(lines).toEqual([expect.objectContaining({ level: 20, msg: 'preflight', method: 'OPTIONS', status: 204 })]);
    },
  );
});

describe('CORS_ORIGINS=off', () => {
  const off = describeAppTest({ env: { CORS_ORIGINS: 'off' } });

  off('no CORS header on any answer, and OPTIONS is a method the path does not have', async ({ request }) => {
    const asked = await request('OPTIONS', '/v1/pets', { headers: preflight('POST') });
    expect(asked.status).toBe(405);
    expect(asked.body).toEqual({ code: 'method_not_allowed', message: expect.any(String), status: 405 });
    const listed = await request('GET', '/v1/pets', { headers: { origin: PAGE } });
    for (const answer of [asked, listed]) {
      expect([...answer.headers.keys()].filter((name) => name.startsWith('access-control-'))).toEqual([]);
    }
  });
});
