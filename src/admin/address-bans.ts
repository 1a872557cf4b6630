import { isIP } from 'node:net';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errors } from '../platform/errors.js';
import type { RateLimiter } from '../rate-limit/plugin.js';
import type { AdminAuditRepository } from '../audit/repository.js';
import { refuseOtherMethods } from '../platform/http/method-not-allowed.js';
import { AddressBans, AddressParams } from '../rate-limit/admin-schemas.js';
import { ErrorBody } from '../platform/schemas/error.js';
import { actorOf } from './auth.js';

const BANS_PATH = '/admin/v1/address-bans';

/**
 * The bans of client addresses (callers without a valid key that kept sending after their 429),
 * for support to see and lift, as a key's ban is: an address shared by many clients (a NAT, a
 * proxy missing from TRUST_PROXY) may be banned for one of them.
 */
const adminAddressBans: FastifyPluginAsyncTypebox<{ audit: AdminAuditRepository; rateLimit: RateLimiter }> = async (
  admin,
  { audit, rateLimit },
) => {
  admin.get(
    BANS_PATH,
    {
      schema: {
        operationId: 'listAddressBans',
        tags: ['address bans'],
        summary: 'The client addresses banned now, from the store the limiter uses',
        response: { 200: AddressBans },
      },
    },
    async () => {
      const { bans, source } = await rateLimit.addressBans(admin.now());
      return { bans: bans.map(({ address, bannedUntil }) => ({ address, bannedUntil: new Date(bannedUntil).toISOString() })), source };
    },
  );

  admin.delete(
    `${BANS_PATH}/:address`,
    {
      schema: {
        operationId: 'liftAddressBan',
        tags: ['address bans'],
        summary: 'Lift the ban of the client an address counts as, in the store the limiter uses; answered 204 also when there was none',
        params: AddressParams,
        response: { 204: { type: 'null', description: 'The address is not banned (any more)' }, 400: ErrorBody },
      },
      config: { writes: true },
    },
    async (request, reply) => {
      const { address } = request.params;
      if (isIP(address.replace(/\/\d{1,3}$/, '')) === 0)
        throw errors.badRequest('params/address must be an IP address, or a client as listed');
      const lifted = await rateLimit.liftAddressBan(address, admin.now());
      if (lifted.bannedUntil !== undefined) {
        await audit.record(actorOf(request), 'address.ban_lift', null, {
          address: lifted.address,
          bannedUntil: new Date(lifted.bannedUntil).toISOString(),
          source: lifted.source,
        });
      }
      return reply.code(204).send();
    },
  );

  refuseOtherMethods(admin, BANS_PATH, ['GET']);
  refuseOtherMethods(admin, `${BANS_PATH}/:address`, ['DELETE']);
};

export default adminAddressBans;
