// The API key leaves the client in the Authorization header only: not in an error (message, stack,
// cause, util.inspect, JSON.stringify), not in what the hooks are shown, whatever fails.
import { randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { afterEach, expect, it } from 'vitest';
import { PetStoreClient, type PetStoreClientOptions } from '../src/index.js';
import { answerGatewayPage, answerJson, fakeServer, silentServer } from './support.js';

const KEY = `psk_${randomUUID()}`;

const servers: Array<{ close: () => Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** Every text a log line, a report or a debugger could show of `value`, down its causes. */
function textsOf(value: unknown, seen = new Set<unknown>()): string[] {
  if (seen.has(value)) return [];
  seen.add(value);
  const texts = [inspect(value, { showHidden: true, depth: Number.POSITIVE_INFINITY }), JSON.stringify(value) ?? '', String(value)];
  if (value instanceof Error) texts.push(value.message, value.stack ?? '', ...textsOf(value.cause, seen));
  if (value && typeof value === 'object' && 'reason' in value) texts.push(...textsOf(value.reason, seen));
  return texts;
}

function expectNoKey(value: unknown, key = KEY) {
  for (const text of textsOf(value)) expect(text.includes(key), `the key in: ${text.slice(0, 300)}`).toBe(false);
}

it('the search finds a key where there is one', () => {
  expect(() => expectNoKey(new Error('failed', { cause: new Error(`Bearer ${KEY}`) }))).toThrow();
  expect(() => expectNoKey({ reason: { detail: [KEY] } })).toThrow();
});

it('an apiKey that is not a valid header value, or empty, is a TypeError at construction, without the key', () => {
  for (const apiKey of [`${KEY}\n`, `${KEY.slice(0, 10)}\n${KEY.slice(10)}`, ` ${KEY}`, `${KEY} x`, `${KEY}\0`, `${KEY}é`]) {
    let error: unknown;
    try {
      new PetStoreClient({ baseUrl: 'http://127.0.0.1:9/v1', apiKey });
    } catch (failure) {
      error = failure;
    }
    expect(error, JSON.stringify(apiKey)).toBeInstanceOf(TypeError);
    expect((error as TypeError).message).toMatch(/^apiKey must be/);
    expectNoKey(error, apiKey.trim().slice(0, 20));
  }
  for (const apiKey of ['', undefined, 42]) {
    expect(() => new PetStoreClient({ baseUrl: 'http://127.0.0.1:9/v1', apiKey: apiKey as string })).toThrow(/^apiKey must be/);
  }
});

it('no error and no hook argument holds the key, whatever fails', async () => {
  const shown: unknown[] = [];
  const options: Partial<PetStoreClientOptions> = {
    maxRetries: 1,
    onRequest: (event) => shown.push(event),
    onResponse: (event) => shown.push(event),
    onRetry: (event) => shown.push(event),
  };
  const fake = await fakeServer((request, response, index) => {
    const path = request.url;
    if (path.startsWith('/v1/pets?limit=1')) return void response.socket!.destroy();
    if (path.startsWith('/v1/pets?limit=2')) return answerGatewayPage(response, 502);
    if (path.startsWith('/v1/pets?limit=3')) return answerJson(response, 401, { code: 'unauthorized', message: 'no such key' });
    if (path.startsWith('/v1/pets?limit=4')) return void response.writeHead(200, { 'content-type': 'text/plain' }).end('not json');
    if (path.startsWith('/v1/pets?limit=5'))
      return answerJson(response, 200, [], { link: '<https://elsewhere.example/v1/pets>; rel="next"' });
    if (path.startsWith('/v1/pets?limit=6'))
      return answerJson(response, 429, { code: 'api_key_banned', message: `banned (${index})` }, { 'retry-after': '900' });
    answerJson(response, 404, { code: 'not_found', message: 'none' });
  });
  const silent = await silentServer();
  servers.push(fake, silent);
  const client = new PetStoreClient({ baseUrl: `${fake.origin}/v1`, apiKey: KEY, ...options });
  // A short timeout only where nothing ever answers: on a loaded machine an answer can take longer.
  const unanswered = new PetStoreClient({ baseUrl: `${silent.origin}/v1`, apiKey: KEY, ...options, timeoutMs: 100 });

  const failures = await Promise.all(
    [
      client.listPets({ limit: 1 }),
      client.listPets({ limit: 2 }),
      client.listPets({ limit: 3 }),
      client.listPets({ limit: 4 }),
      client.listPetsPage({ limit: 5 }),
      client.getPet(1),
      client.listPets({ headers: { 'x-bad': 'a\nb' } }),
      unanswered.listPets(),
    ].map((call) =>
      call.then(
        () => new Error('answered'),
        (failure: unknown) => failure,
      ),
    ),
  );
  failures.push(await client.listPets({ limit: 6 }).catch((failure: unknown) => failure));
  failures.push(await client.listPets({ limit: 6 }).catch((failure: unknown) => failure));
  expect(failures.map((failure) => (failure as { code?: string }).code ?? (failure as Error).name)).toEqual([
    'network_error',
    'unexpected_response',
    'unauthorized',
    'unexpected_response',
    'unexpected_response',
    'not_found',
    'TypeError',
    'timeout',
    'api_key_banned',
    'rate_limited',
  ]);
  // The key went where it belongs, and nowhere else.
  expect(fake.requests.every((request) => request.headers.authorization === `Bearer ${KEY}`)).toBe(true);
  expect(shown.length).toBeGreaterThan(10);
  for (const value of [...failures, ...shown]) expectNoKey(value);
});
