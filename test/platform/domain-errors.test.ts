import Fastify from 'fastify';
import { describe, expect, test } from 'vitest';
import {
  API_KEY_CODES,
  ExpiryFormatError,
  ExpiryNotOnCalendarError,
  ExpiryPastError,
  ExpiryTooLateError,
  MissingLimitsError,
  OriginFormError,
  RepeatedOriginError,
  RevokedKeyError,
  RotatedKeyError,
  UnknownCustomerError,
  UnknownPlanError,
} from '../../src/api-keys/errors.js';
import {
  LimitBelowCostError,
  PLAN_CODES,
  PlanInUseError,
  PlanNameTakenError,
  RepeatedWindowError,
  TooManyWindowsError,
} from '../../src/plans/errors.js';
import { AmountTooSmallError, BalanceLimitError, CREDITS_CODES, NoCreditsError } from '../../src/credits/errors.js';
import { CUSTOMER_CODES, ExternalIdTakenError } from '../../src/customers/errors.js';
import { DATABASE_CODES, DatabaseUnavailableError, DataDirInUseError } from '../../src/platform/db/errors.js';
import { InvalidSettingError } from '../../src/platform/config/errors.js';
import { UsageError } from '../../src/cli/keys/command.js';
import { apiAnswerOf, DOMAIN_CODES, domainError } from '../../src/platform/domain-errors.js';
import { errors } from '../../src/platform/errors.js';
import errorHandler from '../../src/platform/http/error-handler.js';
import { LISTEN_CODE, ListenError } from '../../src/platform/http/listen.js';
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

/** Every error of the features and the processes, made from its values, with the message it must read. */
const CATALOGUE: Array<[Error & { code: string }, string]> = [
  [
    new MissingLimitsError('enterprise'),
    'the enterprise plan has no limits of its own: a key of it needs limits (or perMinute and perDay)',
  ],
  [
    new LimitBelowCostError(2, 5, 'createPet'),
    'is 2, less than the 5 units createPet costs (RATE_LIMIT_COSTS): a key with it could never call it',
  ],
  [new RepeatedWindowError('burst'), 'repeats the window name burst: each window of a list has a name of its own'],
  [new TooManyWindowsError(6), 'would make 6 windows; a list has 5 at most'],
  [new UnknownPlanError('gold'), 'is gold, which names no plan'],
  [new OriginFormError('"https://A.com" is not an origin as browsers send it'), '"https://A.com" is not an origin as browsers send it'],
  [new RepeatedOriginError('"https://a.com"'), 'repeats "https://a.com": each origin is listed once'],
  [new PlanNameTakenError('gold'), 'plan gold exists already'],
  [new PlanInUseError('gold', 2, 'revoke them first'), 'plan gold has working keys: 2; revoke them first'],
  [new ExpiryFormatError(), 'must be an ISO 8601 date-time with a time zone, such as 2027-01-31T00:00:00Z'],
  [new ExpiryNotOnCalendarError('2099-02-31T00:00:00Z'), 'must be a date and time on the calendar; 2099-02-31T00:00:00Z is not'],
  [new ExpiryPastError(), 'must be in the future'],
  [new ExpiryTooLateError('9999-12-31T23:59:59Z'), 'must be no later than 9999-12-31T23:59:59Z'],
  [new RevokedKeyError(7, 'create a new key instead'), 'API key 7 is revoked; create a new key instead'],
  [new RotatedKeyError(7, 8, 'create a new key instead'), 'API key 7 was rotated into key 8; create a new key instead'],
  [new UnknownCustomerError(42), 'is 42, which names no customer'],
  [new ExternalIdTakenError('cus_4711'), 'externalId cus_4711 is taken by another customer'],
  [new NoCreditsError('customer 7'), 'customer 7 has no credits to decrement; set or increment them first'],
  [
    new BalanceLimitError('API key 12', 1e15),
    'the increment would take the balance of API key 12 past 1000000000000000 units; set it instead',
  ],
  [new AmountTooSmallError(1e12, 'increment'), 'must be a whole number from 1 to 1000000000000 for increment'],
  [new DatabaseUnavailableError({ cause: new Error('down') }), 'The database is unreachable'],
  [
    new DataDirInUseError('/var/lib/pets', 4242),
    'The embedded database in /var/lib/pets is in use by process 4242 (a running server?). ' +
      'Stop that process first, or use PostgreSQL through DATABASE_URL so that several processes can share it.',
  ],
  [
    new ListenError('0.0.0.0', 3000, 'permission denied', 'PORT'),
    'Cannot listen on 0.0.0.0:3000: permission denied. Set PORT to a free port.',
  ],
];

describe('the catalogue of domain errors', () => {
  test('each error of a feature or a process says its message from its values alone: its template is its own, no %s left', () => {
    for (const [error, message] of CATALOGUE) {
      expect(error.message).toBe(message);
      expect(error.message).not.toContain('%s');
    }
  });

  test('every code is PETSTORE_ and the kind, defined once, and raised by an error of the catalogue', () => {
    const codes = [
      ...Object.values(API_KEY_CODES),
      ...Object.values(CUSTOMER_CODES),
      ...Object.values(PLAN_CODES),
      ...Object.values(CREDITS_CODES),
      ...Object.values(DATABASE_CODES),
      LISTEN_CODE,
      ...Object.values(DOMAIN_CODES),
    ];
    expect(new Set(codes).size).toBe(codes.length);
    for (const code of codes) expect(code).toMatch(/^PETSTORE_[A-Z_]+$/);
    const raised = [...CATALOGUE.map(([error]) => error.code), new InvalidSettingError('PORT', 'why').code, new UsageError('why').code];
    expect([...new Set(raised)].sort()).toEqual(codes.sort());
  });

  test('a domain error fills its template with its values, keeps its cause, and carries its API answer', () => {
    const answer = { error: () => errors.conflict('taken'), warn: 'taken' };
    const NameTakenError = domainError('PETSTORE_TEST_NAME_TAKEN', 'the name %s is taken by pet %s', answer);
    const cause = new Error('unique violation');
    const error = new NameTakenError('Rex', 12, { cause });
    expect(error).toMatchObject({ code: 'PETSTORE_TEST_NAME_TAKEN', message: 'the name Rex is taken by pet 12', cause });
    expect(apiAnswerOf(error)).toEqual({ error: errors.conflict('taken'), warn: 'taken' });
    expect(apiAnswerOf(new (domainError('PETSTORE_TEST_UNANSWERED', 'no request raises it'))())).toBeUndefined();
    expect(new ListenError('::', 80, 'permission denied', 'PORT', { cause }).cause).toBe(cause);
  });
});

describe('each domain error a request can raise, as the API answers it', () => {
  test.each([
    [
      'limits',
      () => new MissingLimitsError('enterprise'),
      400,
      'bad_request',
      'body the enterprise plan has no limits of its own: a key of it needs limits (or perMinute and perDay)',
    ],
    [
      'limits naming their field',
      () => Object.assign(new LimitBelowCostError(2, 5, 'createPet'), { field: 'perMinute' }),
      400,
      'bad_request',
      'body/perMinute is 2, less than the 5 units createPet costs (RATE_LIMIT_COSTS): a key with it could never call it',
    ],
    [
      'a window named twice',
      () => Object.assign(new RepeatedWindowError('burst'), { field: 'limits/1/name' }),
      400,
      'bad_request',
      'body/limits/1/name repeats the window name burst: each window of a list has a name of its own',
    ],
    ['unknown plan', () => new UnknownPlanError('gold'), 400, 'bad_request', 'body/plan is gold, which names no plan'],
    [
      'plan in use',
      () => new PlanInUseError('gold', 2, 'revoke them first'),
      409,
      'conflict',
      'plan gold has working keys: 2; revoke them first',
    ],
    ['expiry', () => new ExpiryPastError(), 400, 'bad_request', 'body/expiresAt must be in the future'],
    [
      'key state',
      () => new RevokedKeyError(7, 'create a new key instead'),
      409,
      'conflict',
      'API key 7 is revoked; create a new key instead',
    ],
    [
      'key state, rotated',
      () => new RotatedKeyError(7, 8, 'create a new key instead'),
      409,
      'conflict',
      'API key 7 was rotated into key 8; create a new key instead',
    ],
    ['unknown customer', () => new UnknownCustomerError(42), 400, 'bad_request', 'body/customerId is 42, which names no customer'],
    ['externalId taken', () => new ExternalIdTakenError('cus_4711'), 409, 'conflict', 'externalId cus_4711 is taken by another customer'],
    [
      'credits amount',
      () => new AmountTooSmallError(1e12, 'decrement'),
      400,
      'bad_request',
      'body/amount must be a whole number from 1 to 1000000000000 for decrement',
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
    ['a process error', () => new DataDirInUseError('/secret detail', 4242)],
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
