import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errors } from '../platform/errors.js';
import { decodeCursor, encodeCursor, filterDigest, nextLink } from '../platform/pagination.js';
import type { ActorOf } from '../audit/repository.js';
import { creditsSetting } from '../credits/refill.js';
import type { CreditsRepository } from '../credits/repository.js';
import type { ApiKeyRecord, ApiKeysRepository } from './repository.js';
import { expiryOf, newKey, type KeyRules } from './rules.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { AdminKey, AdminKeyChange, AdminKeys, KeyParams, ListKeysQuery, NewAdminKey, RotateKey } from './admin-schemas.js';
import { DEFAULT_PAGE_SIZE } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';

export const KEYS_PATH = '/admin/v1/keys';

export interface AdminKeysOptions {
  keys: ApiKeysRepository;
  rules: KeyRules;
  /** Each key is shown with its quota's credits. */
  credits: CreditsRepository;
  /** Who the admin request's change is recorded as, in the audit trail. */
  actorOf: ActorOf;
}

/** The admin listener's scope the operations are declared in, with the types TypeBox gives their requests. */
type Admin = Parameters<FastifyPluginAsyncTypebox>[0];

const LOCATION = { location: { type: 'string', description: 'Path of the key' } } as const;

/** The key, or the 404 of an operation on a key id that names none. */
export const foundKey = (key: ApiKeyRecord | undefined, id: number): ApiKeyRecord => {
  if (!key) throw errors.notFound(`No API key with id ${id}`);
  return key;
};

/** The key with its quota's credits, as every operation shows it. */
const withCredits = async (credits: CreditsRepository, key: ApiKeyRecord) => (await credits.ofKeys([key]))[0]!;

/**
 * The listing's filters, so that a cursor is used only with the filters it was made for (short: they include a name);
 * without a customer, the digest of the filters before there were customers, so that their cursors still hold.
 */
const filterOf = (query: { plan?: string; state?: string; name?: string; customerId?: number }) =>
  filterDigest([
    query.plan ?? null,
    query.state ?? null,
    query.name ?? null,
    ...(query.customerId === undefined ? [] : [query.customerId]),
  ]);

function createKey(admin: Admin, { rules, credits, actorOf }: AdminKeysOptions) {
  admin.post(
    KEYS_PATH,
    {
      schema: {
        operationId: 'createKey',
        tags: ['keys'],
        summary: 'Issue an API key; the secret is in this answer only',
        body: NewAdminKey,
        response: { 201: { ...AdminKey, headers: LOCATION }, 400: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      const { credits: given, ...fields } = request.body;
      const key = newKey(fields, admin.now());
      const setting = given && creditsSetting(given, admin.now());
      // The secret leaves in this answer only: the stored response a retry gets has no secret.
      let secret: string | undefined;
      const { status, location, body } = await admin.idempotently(request, reply, async (tx) => {
        const issued = await rules.create(key, { tx, actor: actorOf(request), credits: setting });
        secret = issued.key;
        const [record] = await credits.ofKeys([issued.record], tx);
        return { status: 201 as const, location: `${KEYS_PATH}/${issued.id}`, body: record! };
      });
      return reply
        .code(status)
        .header('location', location)
        .send(secret === undefined ? body : { ...body, key: secret });
    },
  );
}

function listKeys(admin: Admin, { keys, credits }: AdminKeysOptions) {
  admin.get(
    KEYS_PATH,
    {
      schema: {
        operationId: 'listKeys',
        tags: ['keys'],
        summary: 'List keys in id order, one page at a time, filtered by plan, state, name and customer',
        querystring: ListKeysQuery,
        response: {
          200: { ...AdminKeys, headers: { link: { type: 'string', description: 'RFC 8288 rel="next" link, when more keys follow' } } },
          400: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { limit = DEFAULT_PAGE_SIZE, cursor, ...filters } = request.query;
      const filter = filterOf(filters);
      const afterId = cursor ? decodeCursor(cursor, filter, 'set of filters (plan, state, name, customerId)') : 0;
      const page = await keys.page({ limit, afterId, ...filters });
      if (page.nextAfterId !== undefined) {
        reply.header('link', nextLink(KEYS_PATH, { ...filters, limit, cursor: encodeCursor(page.nextAfterId, filter) }));
      }
      return credits.ofKeys(page.keys);
    },
  );
}

function getKey(admin: Admin, { keys, credits }: AdminKeysOptions) {
  admin.get(
    `${KEYS_PATH}/:id`,
    {
      schema: {
        operationId: 'getKey',
        tags: ['keys'],
        summary: 'Fetch one key',
        params: KeyParams,
        response: { 200: AdminKey, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => withCredits(credits, foundKey(await keys.get(request.params.id), request.params.id)),
  );
}

function changeKey(admin: Admin, { rules, credits, actorOf }: AdminKeysOptions) {
  admin.patch(
    `${KEYS_PATH}/:id`,
    {
      schema: {
        operationId: 'changeKey',
        tags: ['keys'],
        summary: "Change a key's plan, limits, name, origins or credits; effective on every instance within a second",
        params: KeyParams,
        body: AdminKeyChange,
        response: { 200: AdminKey, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true },
    },
    async (request) => {
      const { id } = request.params;
      const { credits: given, ...fields } = request.body;
      const change = given === undefined ? fields : { ...fields, credits: given && creditsSetting(given, admin.now()) };
      return withCredits(credits, foundKey(await rules.update(id, change, { actor: actorOf(request) }), id));
    },
  );
}

function rotateKey(admin: Admin, { rules, credits, actorOf }: AdminKeysOptions) {
  admin.post(
    `${KEYS_PATH}/:id/rotate`,
    {
      schema: {
        operationId: 'rotateKey',
        tags: ['keys'],
        summary: 'Replace a key with a new one of the same plan, limits, name, scope, origins and quota; the old one works for the overlap',
        params: KeyParams,
        body: RotateKey,
        response: {
          201: { ...AdminKey, headers: LOCATION },
          400: ErrorBody,
          404: ErrorBody,
          409: ErrorBody,
          413: ErrorBody,
          415: ErrorBody,
        },
      },
      config: { writes: true },
      // Every field is optional, so no body at all (`curl -X POST`) means the defaults.
      preValidation: (request, _reply, done) => {
        request.body ??= {};
        done();
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const { overlapSeconds, expiresAt } = request.body;
      const expiry = expiryOf(expiresAt, admin.now());
      const rotated = await rules.rotate(id, { overlapSeconds, expiresAt: expiry }, { actor: actorOf(request) });
      if (!rotated) throw errors.notFound(`No API key with id ${id}`);
      return reply
        .code(201)
        .header('location', `${KEYS_PATH}/${rotated.id}`)
        .send({ ...(await withCredits(credits, rotated.record)), key: rotated.key });
    },
  );
}

function revokeKey(admin: Admin, { rules, credits, actorOf }: AdminKeysOptions) {
  admin.post(
    `${KEYS_PATH}/:id/revoke`,
    {
      schema: {
        operationId: 'revokeKey',
        tags: ['keys'],
        summary:
          'Revoke a key, and the keys rotated into it that still work, on every instance within a second; revoking a revoked key changes nothing',
        params: KeyParams,
        response: { 200: AdminKey, 400: ErrorBody, 404: ErrorBody },
      },
      config: { writes: true },
    },
    async (request) =>
      withCredits(credits, foundKey(await rules.revoke(request.params.id, { actor: actorOf(request) }), request.params.id)),
  );
}

/**
 * The keys, as a sign-up page, a billing system and support see them: thin routes over the key
 * rules (changes) and the repository (reads) the keys command uses too, so the two cannot drift.
 * Changes take effect on every instance through the api_keys notices (migrations/006), as the
 * command's do. Declared in the admin document's order, which is the order of registration.
 */
const adminKeys: FastifyPluginAsyncTypebox<AdminKeysOptions> = async (admin, options) => {
  for (const declare of [createKey, listKeys, getKey, changeKey, rotateKey, revokeKey]) declare(admin, options);
  refuseOtherMethods(admin, KEYS_PATH, ['GET', 'POST']);
  refuseOtherMethods(admin, `${KEYS_PATH}/:id`, ['GET', 'PATCH']);
  refuseOtherMethods(admin, `${KEYS_PATH}/:id/rotate`, ['POST']);
  refuseOtherMethods(admin, `${KEYS_PATH}/:id/revoke`, ['POST']);
};

export default adminKeys;
