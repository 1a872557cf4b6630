import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { recordAudit, type Actor, type ActorOf } from '../audit/repository.js';
import type { Database, Queryable } from '../platform/db/database.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { Id } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { Type } from '@sinclair/typebox';
import { BalanceLimitError, NoCreditsError } from './errors.js';
import { MAX_BALANCE, type CreditsOwner, type CreditsRepository } from './repository.js';
import { Credits, CreditsOperation, MAX_AMOUNT } from './schemas.js';

export interface AdminCreditsOptions {
  db: Database;
  credits: CreditsRepository;
  /** Who the admin request's change is recorded as, in the audit trail. */
  actorOf: ActorOf;
}

/** The admin listener's scope the operations are declared in, with the types TypeBox gives their requests. */
type Admin = Parameters<FastifyPluginAsyncTypebox>[0];

const CUSTOMER_CREDITS_PATH = '/admin/v1/customers/:id/credits';
const KEY_CREDITS_PATH = '/admin/v1/keys/:id/credits';

const params = (of: string) => Type.Object({ id: Type.Integer({ ...Id, description: `The ${of} id` }) });

const DESCRIPTION =
  'set: remaining becomes amount, and spending starts again from it (a refill stays as it is); increment: amount is added, exactly, ' +
  'however many increments run at once; decrement: amount is taken off, never below what was spent (remaining floors at 0). ' +
  'Set and increment make a balance where there is none (without a refill); a decrement of none is a 409. ' +
  'In force on every instance within about a second. A retry with the same Idempotency-Key changes nothing twice.';

/** An operation's change of a balance, with its audit entry, in the transaction given; the credits after. */
async function operate(
  { credits }: AdminCreditsOptions,
  tx: Queryable,
  { owner, label, actor, keyId }: { owner: CreditsOwner; label: string; actor: Actor; keyId: number | null },
  { operation, amount }: CreditsOperation,
): Promise<Credits> {
  if (operation !== 'set' && amount < 1)
    throw errors.badRequest(`body/amount must be a whole number from 1 to ${MAX_AMOUNT} for ${operation}`);
  const { before, after } = await credits.apply(tx, owner, operation, amount);
  if (!after) throw before ? new BalanceLimitError(label, MAX_BALANCE) : new NoCreditsError(label);
  const action = 'customerId' in owner ? 'customer.credits' : 'key.credits';
  await recordAudit(tx, actor, action, keyId, { ...owner, operation, amount, before, after });
  return after;
}

/** Runs a change in the Idempotency-Key's transaction, or in one of its own. */
const atomically = <T>(db: Database, tx: Queryable | undefined, work: (target: Queryable) => Promise<T>) =>
  tx ? work(tx) : db.transaction(work);

function customerCredits(admin: Admin, options: AdminCreditsOptions) {
  admin.post(
    CUSTOMER_CREDITS_PATH,
    {
      schema: {
        operationId: 'changeCustomerCredits',
        tags: ['customers'],
        summary: "Set, increment or decrement a customer's credits, which all its keys spend",
        description: DESCRIPTION,
        params: params('customer'),
        body: CreditsOperation,
        response: { 200: Credits, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      const { id } = request.params;
      const { status, body } = await admin.idempotently(request, reply, (tx) =>
        atomically(options.db, tx, async (target) => {
          if (!(await options.credits.lockCustomer(target, id))) throw errors.notFound(`No customer with id ${id}`);
          const scope = { owner: { customerId: id }, label: `customer ${id}`, actor: options.actorOf(request), keyId: null };
          return { status: 200 as const, body: await operate(options, target, scope, request.body) };
        }),
      );
      return reply.code(status).send(body);
    },
  );
}

function keyCredits(admin: Admin, options: AdminCreditsOptions) {
  admin.post(
    KEY_CREDITS_PATH,
    {
      schema: {
        operationId: 'changeKeyCredits',
        tags: ['keys'],
        summary: "Set, increment or decrement a key's credits: its quota's, which its rotations keep",
        description: DESCRIPTION,
        params: params('key'),
        body: CreditsOperation,
        response: { 200: Credits, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      const { id } = request.params;
      const { status, body } = await admin.idempotently(request, reply, (tx) =>
        atomically(options.db, tx, async (target) => {
          const quotaId = await options.credits.lockQuota(target, id);
          if (quotaId === undefined) throw errors.notFound(`No API key with id ${id}`);
          const scope = { owner: { quotaId }, label: `API key ${id}`, actor: options.actorOf(request), keyId: id };
          return { status: 200 as const, body: await operate(options, target, scope, request.body) };
        }),
      );
      return reply.code(status).send(body);
    },
  );
}

/** The operations on credits: one for a customer's balance, one for a key's (its quota's). */
export const adminCustomerCredits: FastifyPluginAsyncTypebox<AdminCreditsOptions> = async (admin, options) => {
  customerCredits(admin, options);
  refuseOtherMethods(admin, CUSTOMER_CREDITS_PATH, ['POST']);
};

export const adminKeyCredits: FastifyPluginAsyncTypebox<AdminCreditsOptions> = async (admin, options) => {
  keyCredits(admin, options);
  refuseOtherMethods(admin, KEY_CREDITS_PATH, ['POST']);
};
