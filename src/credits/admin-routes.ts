import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { recordAudit, type Actor, type ActorOf } from '../audit/repository.js';
import { atomically, type Database, type Queryable } from '../platform/db/database.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { Id } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { Type } from '@sinclair/typebox';
import { BalanceLimitError, NoCreditsError } from './errors.js';
import { MAX_BALANCE, type BalanceState, type CreditsOwner, type CreditsRepository } from './repository.js';
import { Credits, CreditsOperation, MAX_AMOUNT } from './schemas.js';

export interface AdminCreditsOptions {
  db: Database;
  credits: CreditsRepository;
  /** Who the admin request's change is recorded as, in the audit trail. */
  actorOf: ActorOf;
  /** What the limiter's store has really spent of a balance in its version (the record lags it); undefined when it cannot tell. */
  creditsSpent: (holder: CreditsHolder, balance: Omit<BalanceState, 'spent'>) => Promise<number | undefined>;
}

/** Whose subject keeps a balance in the limiter's store: its customer's, or its key quota's (with the key's customer). */
export type CreditsHolder = { customerId: number } | { quotaId: number; customerId: number | null };

/** The admin listener's scope the operations are declared in, with the types TypeBox gives their requests. */
type Admin = Parameters<FastifyPluginAsyncTypebox>[0];

const params = (of: string) => Type.Object({ id: Type.Integer({ ...Id, description: `The ${of} id` }) });

const DESCRIPTION =
  'set: remaining becomes amount, and spending starts again from it (a refill stays as it is); increment: amount is added, exactly, ' +
  'however many increments run at once; decrement: amount is taken off what really remains (the live balance, ahead of the ' +
  'recorded one), which floors at 0, and spending starts again from the result. ' +
  'Set and increment make a balance where there is none (without a refill); a decrement of none is a 409. ' +
  'In force on every instance within about a second. A retry with the same Idempotency-Key changes nothing twice.';

/** An operation's change of a balance, with its audit entry, in the transaction given; the credits after. */
async function operate(
  options: AdminCreditsOptions,
  tx: Queryable,
  { owner, holder, label, actor, keyId }: { owner: CreditsOwner; holder: CreditsHolder; label: string; actor: Actor; keyId: number | null },
  { operation, amount }: CreditsOperation,
): Promise<Credits> {
  if (operation !== 'set' && amount < 1)
    throw errors.badRequest(`body/amount must be a whole number from 1 to ${MAX_AMOUNT} for ${operation}`);
  const { before, after } =
    operation === 'decrement'
      ? await decrementLive(options, tx, owner, holder, amount)
      : await options.credits.apply(tx, owner, operation, amount);
  if (!after) throw before ? new BalanceLimitError(label, MAX_BALANCE) : new NoCreditsError(label);
  const action = 'customerId' in owner ? 'customer.credits' : 'key.credits';
  await recordAudit(tx, actor, action, keyId, { ...owner, operation, amount, before, after });
  return after;
}

/**
 * A decrement of what really remains: the store's spending, which the record lags by up to a second
 * (a floor at the recorded spending alone left a debt the next increment paid). `after` null: no balance.
 */
async function decrementLive(
  { credits, creditsSpent }: AdminCreditsOptions,
  tx: Queryable,
  owner: CreditsOwner,
  holder: CreditsHolder,
  amount: number,
) {
  for (;;) {
    const balance = await credits.state(tx, owner);
    if (!balance) return { before: null, after: null };
    const spent = Math.max(balance.spent, (await creditsSpent(holder, balance)) ?? 0);
    const changed = await credits.decrement(tx, owner, amount, { version: balance.version, spent });
    // None changed: a refill made a new version meanwhile; decrement that one.
    if (changed.after) return changed;
  }
}

/** What tells one operation on credits from the other: whose balance, and how its owner is found and locked. */
interface CreditsTarget {
  path: string;
  operationId: string;
  tag: string;
  summary: string;
  of: string;
  /** Locks the owner in the transaction and names its balance's scope; undefined for no such owner. */
  scopeOf(options: AdminCreditsOptions, tx: Queryable, id: number, actor: Actor): Promise<CreditsScope | undefined>;
  notFound(id: number): Error;
}

type CreditsScope = Parameters<typeof operate>[2];

const CUSTOMER: CreditsTarget = {
  path: '/admin/v1/customers/:id/credits',
  operationId: 'changeCustomerCredits',
  tag: 'customers',
  summary: "Set, increment or decrement a customer's credits, which all its keys spend",
  of: 'customer',
  scopeOf: async ({ credits }, tx, id, actor) =>
    (await credits.lockCustomer(tx, id))
      ? { owner: { customerId: id }, holder: { customerId: id }, label: `customer ${id}`, actor, keyId: null }
      : undefined,
  notFound: (id) => errors.notFound(`No customer with id ${id}`),
};

const KEY: CreditsTarget = {
  path: '/admin/v1/keys/:id/credits',
  operationId: 'changeKeyCredits',
  tag: 'keys',
  summary: "Set, increment or decrement a key's credits: its quota's, which its rotations keep",
  of: 'key',
  async scopeOf({ credits }, tx, id, actor) {
    const quota = await credits.lockQuota(tx, id);
    return quota && { owner: { quotaId: quota.quotaId }, holder: quota, label: `API key ${id}`, actor, keyId: id };
  },
  notFound: (id) => errors.notFound(`No API key with id ${id}`),
};

/** `POST {path}`: the operation on the target's balance, in the Idempotency-Key's transaction (or one of its own); other methods 405. */
function creditsOperation(target: CreditsTarget): FastifyPluginAsyncTypebox<AdminCreditsOptions> {
  return async (admin: Admin, options) => {
    admin.post(
      target.path,
      {
        schema: {
          operationId: target.operationId,
          tags: [target.tag],
          summary: target.summary,
          description: DESCRIPTION,
          params: params(target.of),
          body: CreditsOperation,
          response: { 200: Credits, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
        },
        config: { writes: true, idempotent: true },
      },
      async (request, reply) => {
        const { id } = request.params;
        const { status, body } = await admin.idempotently(request, reply, (tx) =>
          atomically(options.db, tx, async (work) => {
            const scope = await target.scopeOf(options, work, id, options.actorOf(request));
            if (!scope) throw target.notFound(id);
            return { status: 200 as const, body: await operate(options, work, scope, request.body) };
          }),
        );
        return reply.code(status).send(body);
      },
    );
    refuseOtherMethods(admin, target.path, ['POST']);
  };
}

/** The operations on credits: one for a customer's balance, one for a key's (its quota's). */
export const adminCustomerCredits = creditsOperation(CUSTOMER);
export const adminKeyCredits = creditsOperation(KEY);
