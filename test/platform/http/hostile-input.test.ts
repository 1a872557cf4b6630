import fc from 'fast-check';
import { connect } from 'node:net';
import { Value } from '@sinclair/typebox/value';
import { describe, expect } from 'vitest';
import { NewPet } from '../../../src/pets/schemas.js';
import { ERROR_CODES } from '../../../src/platform/schemas/error.js';
import { appTest } from '../../support/fixtures.js';
import { countPets } from '../../support/pets.js';
import { heapAfterGc } from '../../support/memory.js';
import { bearer } from '../../support/keys.js';
import { MINUTE } from '../../support/time.js';

/** Sends raw bytes to a local port and returns the status, headers (lower-cased names) and body of the answer. */
function rawExchange(port: number, request: string | Buffer): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
    // Refusing a request it has not read to the end, the server may reset the connection right
    // after its answer (Node 24 does when megabytes are still arriving): the answer still counts.
    socket.on('error', (error) => received || reject(error));
    socket.on('close', () => {
      const status = Number(received.match(/^HTTP\/1.1 (\d{3})/)?.[1]);
      const head = received.slice(0, received.indexOf('\r\n\r\n')).split('\r\n').slice(1);
      const headers = Object.fromEntries(
        head.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
      );
      resolve({ status, headers, body: received.slice(received.indexOf('\r\n\r\n') + 4) });
    });
    // No half-close: the request says Connection: close, and the server ends the exchange.
    socket.write(request);
  });
}

// Each reading of the clock is a minute later, so thousands of requests never meet the rate limit.
const test = appTest({ clock: Date.now(), clockStep: MINUTE })
  /** Requests tried, by kind, logged when the file is done. */
  // eslint-disable-next-line no-empty-pattern -- vitest reads a fixture's dependencies from this pattern
  .extend('tried', { scope: 'file' }, ({}, { onCleanup }) => {
    const tried = { bodies: 0, queries: 0, paths: 0, contentTypes: 0, injections: 0 };
    onCleanup(() => console.log(`hostile input: ${JSON.stringify(tried)} requests, no 5xx`));
    return tried;
  })
  /** Sends raw bytes to the app (see rawExchange). */
  .extend(
    'raw',
    { scope: 'file' },
    ({ port }) =>
      (request: string | Buffer) =>
        rawExchange(port, request),
  )
  /** A raw GET of a request target exactly as written, with the app's key unless another Authorization is given. */
  .extend(
    'get',
    { scope: 'file' },
    ({ t, raw }) =>
      (target: string, authorization = t.auth.authorization) =>
        raw(`GET ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: ${authorization}\r\nConnection: close\r\n\r\n`),
  );

function expectWellFormedError(response: { statusCode: number; headers: Record<string, unknown>; body: string }, allowed: number[]) {
  expect(allowed, response.body).toContain(response.statusCode);
  if (response.statusCode < 400) return;
  expect(response.headers['content-type']).toMatch(/^application\/json/);
  const body = JSON.parse(response.body);
  expect(body).toEqual({ code: expect.any(String), message: expect.any(String), status: response.statusCode });
  expect(ERROR_CODES).toContain(body.code);
}

/** Values of every JSON type, with the awkward cases weighted in. */
const nasty = fc.oneof(
  fc.anything(),
  fc.string({ unit: 'binary' }),
  fc.constantFrom('', ' ', '\u0000', 'a\u0000b', '\t\n', '\ud800', '😀'.repeat(300), 'x'.repeat(256), 'x'.repeat(255)),
  fc.double(),
  fc.integer(),
  fc.constantFrom(0, -1, 1.5, 2 ** 53, 2 ** 53 - 1, -(2 ** 63), 1e308, Number.MAX_SAFE_INTEGER + 2, null, true, [], {}),
  fc.constantFrom('available', 'pending', 'sold', 'AVAILABLE', 'sold '),
);

describe('property: any request body', () => {
  test('gets a 201 for a valid NewPet, else a well-formed 400, and stores only what is valid', async ({ t, tried }) => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.record({ name: nasty, categoryId: nasty, status: nasty }, { requiredKeys: [] }),
          fc.record({
            name: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 300 }),
            categoryId: fc.integer({ min: -5, max: 2 ** 31 }),
          }),
          fc.jsonValue(),
        ),
        async (body) => {
          tried.bodies++;
          const before = await countPets(t.db);
          const response = await t.app.inject({
            method: 'POST',
            url: '/v1/pets',
            headers: { ...t.auth, 'content-type': 'application/json' },
            payload: JSON.stringify(body) ?? '',
          });
          expectWellFormedError(response, [201, 400]);
          // The oracle: the schema itself (its pattern compiled with the u flag, as a JSON Schema validator would).
          const valid = Value.Check(NewPet, body) && new RegExp(NewPet.properties.name.pattern!, 'u').test((body as { name: string }).name);
          expect(response.statusCode, JSON.stringify(body)).toBe(valid ? 201 : 400);
          expect(await countPets(t.db)).toBe(before + (valid ? 1 : 0));
          if (valid) {
            const pet = response.json();
            const [row] = await t.db.query<{ name: string; category_id: number; status: string | null }>(
              'SELECT name, category_id, status FROM pets WHERE id = $1',
              [pet.id],
            );
            const sent = body as { name: string; categoryId: number; status?: string };
            expect(row).toEqual({ name: sent.name, category_id: sent.categoryId, status: sent.status ?? null });
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  test('malformed JSON and raw bytes are 400s', async ({ t, tried }) => {
    // Anything but a JSON object, so that no draw can be a valid NewPet by chance.
    const notAnObject = fc.string({ unit: 'binary', maxLength: 200 }).filter((text) => !text.trimStart().startsWith('{'));
    await fc.assert(
      fc.asyncProperty(notAnObject, async (raw) => {
        tried.bodies++;
        const response = await t.app.inject({
          method: 'POST',
          url: '/v1/pets',
          headers: { ...t.auth, 'content-type': 'application/json' },
          payload: raw,
        });
        expectWellFormedError(response, [400]);
      }),
      { numRuns: 200 },
    );
  });
});

describe('a body that is not UTF-8', () => {
  // A lone byte of a two-byte sequence, a continuation byte alone, an overlong '/', an encoded
  // surrogate, a sequence cut short: each would become U+FFFD if decoded leniently.
  const invalid = [[0xc3, 0x28], [0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82]];

  test('is a 400 that names the encoding, and nothing is stored', async ({ t }) => {
    for (const bytes of invalid) {
      const before = await countPets(t.db);
      const response = await t.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { ...t.auth, 'content-type': 'application/json' },
        payload: Buffer.concat([Buffer.from('{"name":"Rex'), Buffer.from(bytes), Buffer.from('","categoryId":1}')]),
      });
      expect(response.statusCode, bytes.join(' ')).toBe(400);
      expect(response.json()).toEqual({ code: 'bad_request', message: 'Request body is not valid UTF-8', status: 400 });
      expect(await countPets(t.db)).toBe(before);
    }
  });

  test('is told apart from valid UTF-8 of every width', async ({ t }) => {
    const name = 'Rex é € 😀';
    const response = await t.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...t.auth, 'content-type': 'application/json; charset=utf-8' },
      payload: Buffer.from(JSON.stringify({ name, categoryId: 1 }), 'utf8'),
    });
    expect(response.statusCode, response.body).toBe(201);
    expect(response.json().name).toBe(name);
  });
});

describe('property: any query string and path', () => {
  test('GET /v1/pets answers 200 or a well-formed 400, whatever the parameters', async ({ t, tried }) => {
    const param = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 50 }),
      fc.integer().map(String),
      fc.double().map(String),
      fc.constant('x'.repeat(5_000)),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.constantFrom('limit', 'status', 'cursor', 'other'), param), { maxLength: 6 }),
        async (pairs) => {
          tried.queries++;
          const query = pairs.map(([key, value]) => `${key}=${encodeURIComponent(value)}`).join('&');
          expectWellFormedError(await t.app.inject({ url: `/v1/pets?${query}`, headers: t.auth }), [200, 400]);
        },
      ),
      { numRuns: 300 },
    );
  });

  test('GET /v1/pets/{petId} answers 200, 404 or a well-formed 400', async ({ t, tried }) => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }), fc.double().map(String), fc.bigInt().map(String)),
        async (id) => {
          tried.paths++;
          expectWellFormedError(await t.app.inject({ url: `/v1/pets/${encodeURIComponent(id)}`, headers: t.auth }), [200, 400, 404]);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('odd Content-Type values', () => {
  test('are a 415 or a 400, never a 5xx', async ({ t, tried }) => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ unit: 'binary', maxLength: 60 }),
          fc.constantFrom(
            'application/json; charset=utf-16',
            'application/json;;',
            'APPLICATION/JSON',
            'application/jsonx',
            'multipart/form-data; boundary=x',
            'application/x-www-form-urlencoded',
            '*/*',
            ';',
          ),
        ),
        async (contentType) => {
          tried.contentTypes++;
          const response = await t.app.inject({
            method: 'POST',
            url: '/v1/pets',
            headers: { ...t.auth, 'content-type': contentType.replace(/[\r\n]/g, '') },
            payload: '{"name":"Typed","categoryId":1}',
          });
          expectWellFormedError(response, [201, 400, 415]);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('SQL injection attempts', () => {
  const attacks = ["' OR '1'='1", '1; DROP TABLE pets; --', '1) OR (1=1', "'; DELETE FROM api_keys; --", '$1', '\\x27', "available' --"];

  test('change nothing: stored literally in a name, refused everywhere else', async ({ t, tried }) => {
    const before = await countPets(t.db);
    for (const attack of attacks) {
      tried.injections += 5;
      const created = await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: { name: attack, categoryId: 1 } });
      expect(created.statusCode).toBe(201);
      expect(created.json().name).toBe(attack);
      for (const url of [
        `/v1/pets?status=${encodeURIComponent(attack)}`,
        `/v1/pets?limit=${encodeURIComponent(attack)}`,
        `/v1/pets?cursor=${encodeURIComponent(attack)}`,
        `/v1/pets/${encodeURIComponent(attack)}`,
      ]) {
        expectWellFormedError(await t.app.inject({ url, headers: t.auth }), [400]);
      }
      expect((await t.app.inject({ url: '/v1/pets', headers: bearer(attack) })).statusCode).toBe(401);
    }
    expect(await countPets(t.db)).toBe(before + attacks.length);
    expect((await t.db.query('SELECT 1 FROM api_keys')).length).toBeGreaterThan(0);
  });
});

describe('paths the router cannot take as they are', () => {
  const expectApiError = (answer: Awaited<ReturnType<typeof rawExchange>>, status: number, code: string) => {
    expect(answer.status, answer.body).toBe(status);
    expect(JSON.parse(answer.body)).toEqual({ code, message: expect.any(String), status });
    expect(answer.headers['x-content-type-options']).toBe('nosniff');
    expect(answer.headers['x-ratelimit-limit']).toMatch(/^[0-9]+$/);
  };

  test("long parameters and malformed percent-encodings get an Error with the usual headers, not the framework's body", async ({ get }) => {
    expectApiError(await get(`/v1/pets/${'1'.repeat(400)}`), 400, 'bad_request');
    for (const path of ['/v1/pets/%', '/v1/pets/%zz', '/v1/pets/%ff']) expectApiError(await get(path), 400, 'bad_request');
    for (const path of ['/v1/%', '/v1/pets/1/%ff', '/v1/%e2%82']) expectApiError(await get(path), 404, 'not_found');
    // Authentication still comes first, as for any other path under /v1.
    expectApiError(await get('/v1/pets/%zz', 'Bearer nope'), 401, 'unauthorized');
    const echoed = await get(`/v1/pets/${'7'.repeat(400)}`);
    expect(echoed.body).not.toContain('7'.repeat(400));
  });

  test("a request target that is no path at all is a 400 Error, never the framework's body", async ({ get }) => {
    for (const target of ['https://', 'http://h%zz/v1']) {
      const answer = await get(target);
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body)).toEqual({ code: 'bad_request', message: expect.any(String), status: 400 });
      expect(answer.headers['x-content-type-options']).toBe('nosniff');
    }
  });

  test('an asterisk-form target (OPTIONS *, GET *) or an absolute URL of another scheme is a 400 Error, not a 404', async ({ t, raw }) => {
    const send = (method: string, target: string) =>
      raw(`${method} ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: ${t.auth.authorization}\r\nConnection: close\r\n\r\n`);
    for (const method of ['OPTIONS', 'GET', 'POST']) {
      for (const target of ['*', 'ftp://x/v1/pets']) {
        const answer = await send(method, target);
        expect(answer.status, `${method} ${target}`).toBe(400);
        expect(JSON.parse(answer.body), `${method} ${target}`).toEqual({
          code: 'bad_request',
          message: 'The request target is not a valid URL path',
          status: 400,
        });
        expect(answer.headers['x-content-type-options']).toBe('nosniff');
      }
    }
    // An http(s) absolute URL is a path: it is routed like one.
    expect((await send('GET', 'http://x/v1/pets')).status).toBe(200);
    expect((await send('GET', 'https://x/nowhere')).status).toBe(404);
  });

  test('property: any path under /v1, long or malformed, is answered through the API (an Error with rate-limit headers)', async ({
    tried,
    get,
  }) => {
    const piece = fc.oneof(
      fc.constantFrom('pets', '1', '%', '%zz', '%ff', '%e2%82', '%2F', '%00', '%25', '..', '.', '', ';', 'a b'.replace(' ', '%20')),
      fc.stringMatching(/^[A-Za-z0-9._~%-]{0,12}$/),
      // Up to five of these stay within Node's 16 KiB for the request line and headers (past it: 431, tested above).
      fc.integer({ min: 1, max: 3_000 }).map((length) => '9'.repeat(length)),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(piece, { minLength: 1, maxLength: 5 }), async (segments) => {
        tried.paths++;
        const answer = await get(`/v1/${segments.join('/')}`);
        expect([200, 400, 404, 405], answer.body).toContain(answer.status);
        expect(answer.headers['x-content-type-options']).toBe('nosniff');
        expect(answer.headers['x-ratelimit-limit']).toMatch(/^[0-9]+$/);
        if (answer.status >= 400) {
          const body = JSON.parse(answer.body);
          expect(body).toEqual({ code: expect.any(String), message: expect.any(String), status: answer.status });
          expect(ERROR_CODES).toContain(body.code);
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe('abusive headers', () => {
  test('a bearer token of megabytes, or oversized headers, get a clean 431 Error and cost no memory', async ({ t, raw }) => {
    const before = heapAfterGc();
    for (let i = 0; i < 20; i++) {
      const answer = await raw(
        `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'a'.repeat(2 * 1024 * 1024)}\r\nConnection: close\r\n\r\n`,
      );
      expect(answer.status).toBe(431);
      expect(JSON.parse(answer.body)).toEqual({ code: 'headers_too_large', message: expect.any(String), status: 431 });
    }
    expect(heapAfterGc() - before).toBeLessThan(8 * 1024 * 1024);
    expect((await t.app.inject({ url: '/v1/pets', headers: t.auth })).statusCode).toBe(200);
  });

  test('many headers are fine; a duplicated Authorization uses the first', async ({ t, raw }) => {
    const many = Array.from({ length: 500 }, (_, i) => `X-Filler-${i}: ${i}`).join('\r\n');
    const answer = await raw(
      `GET /v1/pets HTTP/1.1\r\nHost: x\r\n${many}\r\nAuthorization: ${t.auth.authorization}\r\nConnection: close\r\n\r\n`,
    );
    expect(answer.status).toBe(200);
    const first = await raw(
      `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: ${t.auth.authorization}\r\nAuthorization: Bearer nope\r\nConnection: close\r\n\r\n`,
    );
    expect(first.status).toBe(200);
    const second = await raw(
      `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nAuthorization: ${t.auth.authorization}\r\nConnection: close\r\n\r\n`,
    );
    expect(second.status).toBe(401);
  });

  test('a malformed request line is a 400 Error', async ({ raw }) => {
    const answer = await raw('NOT HTTP AT ALL\r\n\r\n');
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body).code).toBe('bad_request');
  });
});

describe('the surface', () => {
  test('every response carries nosniff, and no-store unless it is a read the client may keep and revalidate', async ({ t }) => {
    const read = await t.app.inject({ url: '/v1/pets', headers: t.auth });
    const revalidated = await t.app.inject({ url: '/v1/pets', headers: { ...t.auth, 'if-none-match': String(read.headers.etag) } });
    expect(revalidated.statusCode).toBe(304);
    for (const response of [read, revalidated]) {
      expect(response.headers['x-content-type-options']).toBe('nosniff');
      expect(response.headers['cache-control']).toBe('private, no-cache');
    }
    for (const response of [
      await t.app.inject({ method: 'POST', url: '/v1/pets', headers: t.auth, payload: { name: 'Stored nowhere', categoryId: 1 } }),
      await t.app.inject({ url: '/v1/pets?limit=0', headers: t.auth }),
      await t.app.inject({ url: '/v1/pets/999999999', headers: t.auth }),
      await t.app.inject({ url: '/v1/pets' }),
      await t.app.inject({ url: '/nowhere' }),
      await t.app.inject({ url: '/healthz' }),
    ]) {
      expect(response.headers['x-content-type-options']).toBe('nosniff');
      expect(response.headers['cache-control']).toBe('no-store');
    }
  });

  test('no plaintext key in any log line, at any level, after all of the above', async ({ t }) => {
    const key = t.auth.authorization.slice('Bearer '.length);
    const logs = t.logs.lines.join('\n');
    expect(logs).not.toContain(key);
    expect(logs).not.toContain(key.slice(4));
    expect(logs).not.toMatch(/psk_[A-Za-z0-9_-]{43}/);
  });
});
