import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ActorOf } from '../audit/repository.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { NewPlan, Plan, PlanParams, PlanPatch, Plans } from './admin-schemas.js';
import type { PlanRecord } from './repository.js';
import type { PlanRules } from './rules.js';

export const PLANS_PATH = '/admin/v1/plans';

export interface AdminPlansOptions {
  plans: PlanRules;
  /** Who the admin request's change is recorded as, in the audit trail. */
  actorOf: ActorOf;
}

/** The admin listener's scope the operations are declared in, with the types TypeBox gives their requests. */
type Admin = Parameters<FastifyPluginAsyncTypebox>[0];

const LOCATION = { location: { type: 'string', description: 'Path of the plan' } } as const;

/** A plan as the responses show it (Plan): its windows a list of the response's own. */
const shown = (plan: PlanRecord): Plan => ({ ...plan, limits: plan.limits && [...plan.limits] });

/** The plan, or the 404 of an operation on a name that names none. */
const foundPlan = (plan: PlanRecord | undefined, name: string): Plan => {
  if (!plan) throw errors.notFound(`No plan named ${name}`);
  return shown(plan);
};

function createPlan(admin: Admin, { plans, actorOf }: AdminPlansOptions) {
  admin.post(
    PLANS_PATH,
    {
      schema: {
        operationId: 'createPlan',
        tags: ['plans'],
        summary: 'Create a plan: its named windows, concurrency and shadow mode',
        body: NewPlan,
        response: { 201: { ...Plan, headers: LOCATION }, 400: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      plans.checkLimits(request.body.limits);
      const { status, location, body } = await admin.idempotently(request, reply, async (tx) => {
        const plan = await plans.create(request.body, { tx, actor: actorOf(request) });
        return { status: 201 as const, location: `${PLANS_PATH}/${plan.name}`, body: shown(plan) };
      });
      return reply.code(status).header('location', location).send(body);
    },
  );
}

function listPlans(admin: Admin, { plans }: AdminPlansOptions) {
  admin.get(
    PLANS_PATH,
    {
      schema: {
        operationId: 'listPlans',
        tags: ['plans'],
        summary: 'List every plan, by name',
        response: { 200: Plans },
      },
    },
    async () => (await plans.list()).map(shown),
  );
}

function getPlan(admin: Admin, { plans }: AdminPlansOptions) {
  admin.get(
    `${PLANS_PATH}/:name`,
    {
      schema: {
        operationId: 'getPlan',
        tags: ['plans'],
        summary: 'Fetch one plan',
        params: PlanParams,
        response: { 200: Plan, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => foundPlan(await plans.get(request.params.name), request.params.name),
  );
}

function changePlan(admin: Admin, { plans, actorOf }: AdminPlansOptions) {
  admin.patch(
    `${PLANS_PATH}/:name`,
    {
      schema: {
        operationId: 'changePlan',
        tags: ['plans'],
        summary: "Change a plan's limits, concurrency or shadow mode; every instance applies it within a second",
        params: PlanParams,
        body: PlanPatch,
        response: { 200: Plan, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true },
    },
    async (request) => {
      const { name } = request.params;
      plans.checkLimits(request.body.limits);
      return foundPlan(await plans.update(name, request.body, { actor: actorOf(request) }), name);
    },
  );
}

function deletePlan(admin: Admin, { plans, actorOf }: AdminPlansOptions) {
  admin.delete(
    `${PLANS_PATH}/:name`,
    {
      schema: {
        operationId: 'deletePlan',
        tags: ['plans'],
        summary: 'Delete a plan no working key has',
        params: PlanParams,
        response: { 204: { type: 'null', description: 'The plan is deleted' }, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody },
      },
      config: { writes: true },
    },
    async (request, reply) => {
      const { name } = request.params;
      if (!(await plans.delete(name, { actor: actorOf(request) }))) throw errors.notFound(`No plan named ${name}`);
      return reply.code(204).send();
    },
  );
}

/**
 * The plans: the limits, concurrency and shadow mode of every key of a plan that carries no limits
 * of its own. Declared in the admin document's order, which is the order of registration.
 */
const adminPlans: FastifyPluginAsyncTypebox<AdminPlansOptions> = async (admin, options) => {
  for (const declare of [createPlan, listPlans, getPlan, changePlan, deletePlan]) declare(admin, options);
  refuseOtherMethods(admin, PLANS_PATH, ['GET', 'POST']);
  refuseOtherMethods(admin, `${PLANS_PATH}/:name`, ['GET', 'PATCH', 'DELETE']);
};

export default adminPlans;
