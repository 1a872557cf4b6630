import Fastify from 'fastify';
import { describe, expect, test } from 'vitest';
import errorHandler from '../../src/platform/http/error-handler.js';
import { InvalidSettingError } from '../../src/platform/config/errors.js';
import {
  DatabaseUnavailableError,
  DataDirInUseError,
  DOMAIN_CODES,
  ExpiryError,
  KeyStateError,
  LimitsError,
  ListenError,
  UsageError,
} from '../../src/platform/domain-errors.js';
import { captureLogs } from '../support/logs.js';

/** A listener with the error handler both listeners register, answering GET / with what `fail` throws. */
async function answerTo(fail: () => Error) {
  const logs = captureLogs();
  const app = Fastify({ logger: { level: 'warn', stream: logs.stream } });
  await app.register(errorHandler);
  app.get('/', async () => {
    throw fail();
  });
  try {
    const response = await app.inject('/');
    return { response, body: response.json(), logs: logs.entries() };
  } finally {
    await app.close();
  }
}

describe('the catalogue of domain errors', () => {
  test('every error has a code of its own, PETSTORE_ and the kind', () => {
    const constructors = [LimitsError, ExpiryError, KeyStateError, DataDirInUseError, ListenError, UsageError];
    const codes = [
      ...constructors.map((Coded) => new Coded('why').code),
      new DatabaseUnavailableError({ cause: new Error('down') }).code,
      new InvalidSettingError('PORT', 'why').code,
    ];
    expect(new Set(codes).size).toBe(codes.length);
    expect(codes.sort()).toEqual(Object.values(DOMAIN_CODES).sort());
    for (const code of codes) expect(code).toMatch(/^PETSTORE_[A-Z_]+$/);
  });

  test('an error keeps its message and its cause', () => {
    const cause = new Error('ECONNREFUSED');
    expect(new LimitsError('enterprise keys need per-minute and per-day limits').message).toBe(
      'enterprise keys need per-minute and per-day limits',
    );
    expect(new ListenError('Cannot listen', { cause }).cause).toBe(cause);
    const unavailable = new DatabaseUnavailableError({ cause });
    expect([unavailable.message, unavailable.cause]).toEqual(['The database is unreachable', cause]);
  });
});

describe('each domain error a request can raise, as the API answers it', () => {
  test.each([
    [
      'limits',
      () => new LimitsError('per-minute and per-day limits are for enterprise keys'),
      400,
      'bad_request',
      'body per-minute and per-day limits are for enterprise keys',
    ],
    ['expiry', () => new ExpiryError('must be in the future'), 400, 'bad_request', 'body/expiresAt must be in the future'],
    [
      'key state',
      () => new KeyStateError('API key 7 is revoked; create a new key instead'),
      409,
      'conflict',
      'API key 7 is revoked; create a new key instead',
    ],
  ])("%s: %i %s with the rule's message", async (_kind, fail, status, code, message) => {
    const { response, body, logs } = await answerTo(fail);
    expect(response.statusCode).toBe(status);
    expect(body).toEqual({ code, message, status });
    expect(logs).toEqual([]);
  });

  test('the database out of reach: a 503 to retry, its cause logged as a warning and never answered', async () => {
    const { response, body, logs } = await answerTo(
      () => new DatabaseUnavailableError({ cause: new Error('connect ECONNREFUSED 10.0.0.5:5432') }),
    );
    expect(response.statusCode).toBe(503);
    expect(response.headers['retry-after']).toBe('5');
    expect(body).toEqual({
      code: 'service_unavailable',
      message: expect.stringMatching(/^The database is unreachable; retry later \(request id .+\)$/),
      status: 503,
    });
    expect(logs).toMatchObject([{ level: 40, msg: 'database unavailable', err: { message: 'connect ECONNREFUSED 10.0.0.5:5432' } }]);
  });

  test.each([
    ['an error of the catalogue no request raises', () => new InvalidSettingError('PORT="x"', 'secret detail')],
    ['an unknown error', () => new Error('relation "pets" does not exist: secret detail')],
  ])('%s: the 500 that leaks nothing, logged', async (_kind, fail) => {
    const { response, body, logs } = await answerTo(fail);
    expect(response.statusCode).toBe(500);
    expect(body).toEqual({
      code: 'internal_error',
      message: expect.stringMatching(/^Internal server error \(request id .+\)$/),
      status: 500,
    });
    expect(JSON.stringify(body)).not.toContain('secret detail');
    expect(logs).toMatchObject([{ msg: 'unexpected error', err: { message: expect.stringContaining('secret detail') } }]);
  });
});
