import { isIP } from 'node:net';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errors } from '../../platform/errors.js';
import type { ActorOf, AdminAuditRepository } from '../../audit/repository.js';
import type { ApiKeysRepository } from '../../api-keys/repository.js';
import { foundKey, KEYS_PATH } from '../../api-keys/admin-routes.js';
import { KeyParams } from '../../api-keys/admin-schemas.js';
import { refuseOtherMethods } from '../../platform/http/method-not-allowed.js';
import type { AdminOperations } from './admin-operations.js';
import { AddressBans, AddressParams, KeyUsage } from './admin-schemas.js';
import { ErrorBody } from '../../platform/schemas/error.js';

const BANS_PATH = '/admin/v1/address-bans';

export interface AdminBansOptions {
  /** The limiter's operations the admin API reads and lifts through. */
  rateLimit: AdminOperations;
  audit: AdminAuditRepository;
  /** Who the admin request's lift of a ban is recorded as, in the audit trail. */
  actorOf: ActorOf;
}

/**
 * A key's windows and ban as the store the limiter decides from holds them (what its next request
 * meets), and the lift of its ban.
 */
export const adminKeyUsage: FastifyPluginAsyncTypebox<AdminBansOptions & { keys: ApiKeysRepository }> = async (
  admin,
  { keys, rateLimit, audit, actorOf },
) => {
  admin.get(
    `${KEYS_PATH}/:id/usage`,
    {
      schema: {
        operationId: 'getKeyUsage',
        tags: ['keys'],
        summary: "What the key's windows hold now, and its ban, from the store the limiter uses",
        params: KeyParams,
        response: { 200: KeyUsage, 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (request) => {
      const key = foundKey(await keys.get(request.params.id), request.params.id);
      const { decision, source } = await rateLimit.usage(key, rateLimit.policyOf(key).limits, admin.now());
      const windows = decision.windows.map(({ name, windowSeconds, limit, used, resetAt }) => ({
        name,
        windowSeconds,
        limit,
        used,
        resetAt: new Date(resetAt).toISOString(),
      }));
      const named = (name: string) => {
        const window = windows.find((window) => window.name === name);
        return window && { limit: window.limit, used: window.used, resetAt: window.resetAt };
      };
      return {
        windows,
        minute: named('minute'),
        day: named('day'),
        bannedUntil: decision.outcome === 'banned' ? new Date(decision.bannedUntil).toISOString() : null,
        source,
      };
    },
  );

  admin.delete(
    `${KEYS_PATH}/:id/ban`,
    {
      schema: {
        operationId: 'liftKeyBan',
        tags: ['keys'],
        summary: "Lift the key's ban, in the store the limiter uses; answered 204 also when there was none",
        params: KeyParams,
        response: { 204: { type: 'null', description: 'The key is not banned (any more)' }, 400: ErrorBody, 404: ErrorBody },
      },
      config: { writes: true },
    },
    async (request, reply) => {
      const key = foundKey(await keys.get(request.params.id), request.params.id);
      const now = admin.now();
      const { decision } = await rateLimit.usage(key, rateLimit.policyOf(key).limits, now);
      const source = await rateLimit.liftBan(key, now);
      if (decision.outcome === 'banned') {
        await audit.record(actorOf(request), 'key.ban_lift', key.id, { bannedUntil: new Date(decision.bannedUntil).toISOString(), source });
      }
      return reply.code(204).send();
    },
  );

  refuseOtherMethods(admin, `${KEYS_PATH}/:id/usage`, ['GET']);
  refuseOtherMethods(admin, `${KEYS_PATH}/:id/ban`, ['DELETE']);
};

/**
 * The bans of client addresses (callers without a valid key that kept sending after their 429),
 * for support to see and lift, as a key's ban is: an address shared by many clients (a NAT, a
 * proxy missing from TRUST_PROXY) may be banned for one of them.
 */
export const adminAddressBans: FastifyPluginAsyncTypebox<AdminBansOptions> = async (admin, { rateLimit, audit, actorOf }) => {
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
