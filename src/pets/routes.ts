import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errors } from '../platform/errors.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { decodeCursor, encodeCursor, nextLink } from '../platform/pagination.js';
import { DEFAULT_PAGE_SIZE } from '../platform/schemas/common.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { ListPetsQuery, NewPet, Pet, PetParams, Pets } from './schemas.js';

/** The interface deprecates getPet with the 1.0.0 release and removes it on 5 December 2030. */
const DEPRECATED_AT = new Date('2025-12-05T00:00:00Z');
const SUNSET = new Date('2030-12-05T00:00:00Z');

const pets: FastifyPluginAsyncTypebox = async (app) => {
  const base = app.config.PUBLIC_BASE_URL;

  app.get(
    '/pets',
    {
      schema: {
        operationId: 'listPets',
        tags: ['pets'],
        summary: 'List animals in id order, one page at a time',
        description: 'When more animals follow, the response has a `Link: <...>; rel="next"` header whose URL continues the listing.',
        querystring: ListPetsQuery,
        response: {
          200: { ...Pets, headers: { link: { type: 'string', description: 'RFC 8288 rel="next" link, when more results exist' } } },
          400: ErrorBody,
        },
      },
    },
    async (request, reply) => {
      const { limit = DEFAULT_PAGE_SIZE, status, cursor } = request.query;
      const page = await app.petsRepository.list({ limit, status, afterId: cursor ? decodeCursor(cursor, status) : 0 });
      if (page.nextAfterId !== undefined) {
        reply.header('link', nextLink(`${base}/pets`, { limit, status, cursor: encodeCursor(page.nextAfterId, status) }));
      }
      return page.pets;
    },
  );

  app.post(
    '/pets',
    {
      schema: {
        operationId: 'createPet',
        tags: ['pets'],
        summary: 'Add an animal',
        body: NewPet,
        response: {
          201: { ...Pet, headers: { location: { type: 'string', description: 'URL of the new animal' } } },
          400: ErrorBody,
          413: ErrorBody,
          415: ErrorBody,
        },
      },
      config: { writes: true, idempotent: true },
    },
    async (request, reply) => {
      const { status, location, body } = await app.idempotently(request, reply, async (tx) => {
        const pet = await app.petsRepository.create(request.body, tx);
        return { status: 201 as const, location: `${base}/pets/${pet.id}`, body: pet };
      });
      return reply.code(status).header('location', location).send(body);
    },
  );

  app.get(
    '/pets/:petId',
    {
      schema: {
        operationId: 'getPet',
        tags: ['pets'],
        summary: 'Fetch one animal (deprecated)',
        description: `Deprecated; removed on ${SUNSET.toUTCString()}, after which it answers 410. Use GET /pets with the status filter instead.`,
        deprecated: true,
        params: PetParams,
        response: { 200: Pet, 400: ErrorBody, 404: ErrorBody, 410: ErrorBody },
      },
      config: {
        deprecation: {
          deprecatedAt: DEPRECATED_AT,
          sunset: SUNSET,
          successor: `${base}/pets`,
          documentation: `${base}/openapi.json#/paths/~1pets~1{petId}/get`,
        },
      },
    },
    async (request) => {
      const pet = await app.petsRepository.findById(request.params.petId);
      if (!pet) throw errors.notFound(`No pet with id ${request.params.petId}`);
      return pet;
    },
  );

  refuseOtherMethods(app, '/pets', ['GET', 'POST']);
  refuseOtherMethods(app, '/pets/:petId', ['GET']);
};

export default pets;
