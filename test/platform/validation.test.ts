import Fastify from 'fastify';
import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { formatValidationError, validatorCompiler } from '../../src/platform/validation.js';

/**
 * The validator with parameter shapes the API does not use yet, so the next parameter someone
 * adds (a flag, a ratio, a list of ids) converts as strictly as `limit` does today.
 */
const app = Fastify();
app.setValidatorCompiler(validatorCompiler);
app.setSchemaErrorFormatter(formatValidationError);
app.get(
  '/things/:id',
  {
    schema: {
      params: Type.Object({ id: Type.Integer({ minimum: 1 }) }),
      querystring: Type.Object({
        flag: Type.Optional(Type.Boolean()),
        ratio: Type.Optional(Type.Number()),
        ids: Type.Optional(Type.Array(Type.Integer())),
        size: Type.Integer({ default: 20, 'x-error-message': 'must be a whole number' }),
      }),
    },
  },
  async (request) => ({ params: request.params, query: request.query }),
);

// Flat, as every query of the API is: its defaults are filled in without TypeBox's walk of the schema.
app.get(
  '/flat',
  {
    schema: {
      querystring: Type.Object({
        size: Type.Integer({ default: 20 }),
        kind: Type.Optional(Type.Union([Type.Literal('a'), Type.Literal('b')])),
        label: Type.String({ default: 'none' }),
      }),
    },
  },
  async (request) => ({ query: request.query }),
);

// A field that is an object or null, as a PATCH takes one that may be removed.
app.post(
  '/choices',
  {
    schema: {
      body: Type.Object({
        limits: Type.Optional(
          Type.Union(
            [
              Type.Object({
                a: Type.Integer(),
                b: Type.Optional(Type.Object({ c: Type.Integer({ maximum: 3, 'x-error-message': 'must be at most 3' }) })),
              }),
              Type.Null(),
            ],
            { 'x-error-message': 'must be an object with a, or null' },
          ),
        ),
        kind: Type.Optional(Type.Union([Type.Literal('a'), Type.Literal('b')], { 'x-error-message': 'must be one of a, b' })),
      }),
    },
  },
  async (request) => request.body,
);

const get = async (url: string) => {
  const response = await app.inject(url);
  return { status: response.statusCode, body: response.json() };
};

describe('parameters on the wire', () => {
  it('convert to booleans, numbers, arrays and integers, with defaults', async () => {
    expect(await get('/things/7?flag=true&ratio=1.5&ids=1&ids=2')).toEqual({
      status: 200,
      body: { params: { id: 7 }, query: { flag: true, ratio: 1.5, ids: [1, 2], size: 20 } },
    });
    expect((await get('/things/7?flag=false&ids=3&size=5')).body.query).toEqual({ flag: false, ids: [3], size: 5 });
    expect((await get('/flat')).body.query).toEqual({ size: 20, label: 'none' });
    expect((await get('/flat?size=5&kind=b')).body.query).toEqual({ size: 5, kind: 'b', label: 'none' });
    expect((await get('/flat?size=05')).status).toBe(400);
    expect((await get('/things/7?ratio=-0.25')).body.query.ratio).toBe(-0.25);
  });

  it('convert only text written exactly as the value: anything looser is a 400 naming the field', async () => {
    for (const [url, field] of [
      ['/things/007', 'params/id'],
      ['/things/1e3', 'params/id'],
      ['/things/7?size=1.5', 'querystring/size'],
      ['/things/7?size=%201', 'querystring/size'],
      ['/things/7?size=', 'querystring/size'],
      ['/things/7?size=1&size=2', 'querystring/size'],
      ['/things/7?flag=1', 'querystring/flag'],
      ['/things/7?flag=TRUE', 'querystring/flag'],
      ['/things/7?ratio=1e3', 'querystring/ratio'],
      ['/things/7?ratio=0x10', 'querystring/ratio'],
      ['/things/7?ids=1&ids=007', 'querystring/ids/1'],
    ]) {
      const { status, body } = await get(url!);
      expect(status, url).toBe(400);
      expect(body.message, url).toMatch(new RegExp(`^${field} `));
    }
    expect((await get('/things/7?size=x')).body.message).toBe('querystring/size must be a whole number');
  });
});

describe('a body field that is an object or null', () => {
  it('names the field inside the object that is wrong; a value of neither type, or a choice of literals, gets the union’s wording', async () => {
    const post = async (payload: unknown) => (await app.inject({ method: 'POST', url: '/choices', payload: payload as object })).json();
    expect((await post({ limits: { a: 1, b: { c: 9 } } })).message).toBe('body/limits/b/c must be at most 3');
    expect((await post({ limits: {} })).message).toBe('body/limits/a is required');
    expect((await post({ limits: 5 })).message).toBe('body/limits must be an object with a, or null');
    expect((await post({ kind: 'z' })).message).toBe('body/kind must be one of a, b');
    expect(await post({ limits: null })).toEqual({ limits: null });
  });
});
