import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ActorOf } from '../audit/repository.js';
import { creditsSetting } from '../credits/refill.js';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { decodeCursor, encodeCursor, filterDigest, nextLink } from '../platform/pagination.js';
import { DEFAULT_PAGE_SIZE } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { Customer, CustomerParams, CustomerPatch, Customers, ListCustomersQuery, NewCustomer } from './admin-schemas.js';
import { customerLimitsOf, type CustomerRecord, type CustomerRules } from './rules.js';

export const CUSTOMERS_PATH = '/admin/v1/customers';

export interface AdminCustomersOptions {
  customers: CustomerRules;
  /** Who the admin request's change is recorded as, in the audit trail. */
  actorOf: ActorOf;
  /** RATE_LIMIT_COSTS, which the customer's limits must fit, as a key's own limits must. */
  costs: Record<string, number>;
}

/** The admin listener's scope the operations are declared in, with the types TypeBox gives their requests. */
type Admin = Parameters<FastifyPluginAsyncTypebox>[0];

const LOCATION = { location: { type: 'string', description: 'Path of the customer' } } as const;

/** The customer, or the 404 of an operation on an id that names none. */
const foundCustomer = (customer: CustomerRecord | undefined, id: number): CustomerRecord => {
  if (!customer) throw errors.notFound(`No customer with id ${id}`);
  return customer;
};

/** The listing's filter, so that a cursor is used only with the filter it was made for (a digest, short as the keys' is). */
const filterOf = (externalId: string | undefined) => (externalId === undefined ? undefined : filterDigest([externalId]));

function createCustomer(admin: Admin, { customers, actorOf, costs }: AdminCustomersOptions) {
  admin.post(
    CUSTOMERS_PATH,
    {
      schema: {
        operationId: 'createCustomer',
        tags: ['customers'],
        summary: 'Create a customer, known by the seller’s own id (externalId)',
        body: NewCustomer,
        response: { 201: { ...Customer, headers: LOCATION }, 400: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      const { credits, limits: given, ...fields } = request.body;
      const limits = customerLimitsOf(given, costs);
      const setting = credits && creditsSetting(credits, admin.now());
      const { status, location, body } = await admin.idempotently(request, reply, async (tx) => {
        const customer = await customers.create({ ...fields, limits, credits: setting }, { tx, actor: actorOf(request) });
        return { status: 201 as const, location: `${CUSTOMERS_PATH}/${customer.id}`, body: customer };
      });
      return reply.code(status).header('location', location).send(body);
    },
  );
}

function listCustomers(admin: Admin, { customers }: AdminCustomersOptions) {
  admin.get(
    CUSTOMERS_PATH,
    {
      schema: {
        operationId: 'listCustomers',
        tags: ['customers'],
        summary: 'List customers in id order, one page at a time, filtered by externalId',
        querystring: ListCustomersQuery,
        response: {
          200: {
            ...Customers,
            headers: { link: { type: 'string', description: 'RFC 8288 rel="next" link, when more customers follow' } },
          },
          400: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { limit = DEFAULT_PAGE_SIZE, cursor, externalId } = request.query;
      const filter = filterOf(externalId);
      const afterId = cursor ? decodeCursor(cursor, filter, 'externalId filter') : 0;
      const page = await customers.page({ limit, afterId, externalId });
      if (page.nextAfterId !== undefined) {
        reply.header('link', nextLink(CUSTOMERS_PATH, { externalId, limit, cursor: encodeCursor(page.nextAfterId, filter) }));
      }
      return page.customers;
    },
  );
}

function getCustomer(admin: Admin, { customers }: AdminCustomersOptions) {
  admin.get(
    `${CUSTOMERS_PATH}/:id`,
    {
      schema: {
        operationId: 'getCustomer',
        tags: ['customers'],
        summary: 'Fetch one customer',
        params: CustomerParams,
        response: { 200: Customer, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => foundCustomer(await customers.get(request.params.id), request.params.id),
  );
}

function changeCustomer(admin: Admin, { customers, actorOf, costs }: AdminCustomersOptions) {
  admin.patch(
    `${CUSTOMERS_PATH}/:id`,
    {
      schema: {
        operationId: 'changeCustomer',
        tags: ['customers'],
        summary: "Change a customer's name, externalId, limits or credits",
        params: CustomerParams,
        body: CustomerPatch,
        response: { 200: Customer, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      config: { writes: true },
    },
    async (request) => {
      const { id } = request.params;
      const { credits, limits: given, ...rest } = request.body;
      const fields = { ...rest, limits: customerLimitsOf(given, costs) };
      const change = credits === undefined ? fields : { ...fields, credits: credits && creditsSetting(credits, admin.now()) };
      return foundCustomer(await customers.update(id, change, { actor: actorOf(request) }), id);
    },
  );
}

/**
 * The customers of the seller, each known by the seller's own id (externalId), who may own several
 * keys. Declared in the admin document's order, which is the order of registration.
 */
const adminCustomers: FastifyPluginAsyncTypebox<AdminCustomersOptions> = async (admin, options) => {
  for (const declare of [createCustomer, listCustomers, getCustomer, changeCustomer]) declare(admin, options);
  refuseOtherMethods(admin, CUSTOMERS_PATH, ['GET', 'POST']);
  refuseOtherMethods(admin, `${CUSTOMERS_PATH}/:id`, ['GET', 'PATCH']);
};

export default adminCustomers;
