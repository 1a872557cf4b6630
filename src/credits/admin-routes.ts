import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ActorOf } from '../audit/repository.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { Id } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { Type } from '@sinclair/typebox';
import type { CreditsRules } from './rules.js';
import { Credits, CreditsOperation } from './schemas.js';

export interface AdminCreditsOptions {
  rules: CreditsRules;
  /** Who the admin request's change is recorded as, in the audit trail. */
  actorOf: ActorOf;
}

/** The admin listener's scope the operations are declared in, with the types TypeBox gives their requests. */
type Admin = Parameters<FastifyPluginAsyncTypebox>[0];

const params = (of: string) => Type.Object({ id: Type.Integer({ ...Id, description: `The ${of} id` }) });

const DESCRIPTION =
  'set: remaining becomes amount, and spending starts again from it (a refill stays as it is); increment: amount is added, exactly, ' +
  'however many increments run at once; decrement: amount is taken off what really remains (the live balance, ahead of the ' +
  'recorded one), which floors at 0, and spending starts again from the result. ' +
  'Set and increment make a balance where there is none (without a refill); a decrement of none is a 409. ' +
  'In force on every instance within about a second. A retry with the same Idempotency-Key changes nothing twice.';

/** What tells one operation on credits from the other: whose balance, and which rule changes it. */
interface CreditsTarget {
  path: string;
  operationId: string;
  tag: string;
  summary: string;
  of: string;
  rule: keyof CreditsRules;
  notFound(id: number): Error;
}

const CUSTOMER: CreditsTarget = {
  path: '/admin/v1/customers/:id/credits',
  operationId: 'changeCustomerCredits',
  tag: 'customers',
  summary: "Set, increment or decrement a customer's credits, which all its keys spend",
  of: 'customer',
  rule: 'changeCustomer',
  notFound: (id) => errors.notFound(`No customer with id ${id}`),
};

const KEY: CreditsTarget = {
  path: '/admin/v1/keys/:id/credits',
  operationId: 'changeKeyCredits',
  tag: 'keys',
  summary: "Set, increment or decrement a key's credits: its quota's, which its rotations keep",
  of: 'key',
  rule: 'changeKey',
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
        const { status, body } = await admin.idempotently(request, reply, async (tx) => {
          const credits = await options.rules[target.rule](id, request.body, { tx, actor: options.actorOf(request) });
          if (!credits) throw target.notFound(id);
          return { status: 200 as const, body: credits };
        });
        return reply.code(status).send(body);
      },
    );
    refuseOtherMethods(admin, target.path, ['POST']);
  };
}

/** The operations on credits: one for a customer's balance, one for a key's (its quota's). */
export const adminCustomerCredits = creditsOperation(CUSTOMER);
export const adminKeyCredits = creditsOperation(KEY);
