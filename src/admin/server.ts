import Fastify, { type FastifyInstance } from 'fastify';
import { listenerOptions, serveJson } from '../platform/http/listener.js';
import { requestIdGenerator } from '../platform/http/request-id.js';
import errorHandler from '../platform/http/error-handler.js';
import idempotency from '../idempotency/plugin.js';
import openapi from '../platform/http/openapi.js';
import { createAdminAuditRepository } from '../audit/repository.js';
import { createAdminTokensRepository } from './tokens-repository.js';
import { createIdempotencyKeysRepository } from '../idempotency/repository.js';
import adminAuth, { actorOf, ADMIN_SECURITY_SCHEME, TOKEN_IN_REQUEST_LOG } from './auth.js';
import { documentAdminOperation } from './contract.js';
import adminKeys from '../api-keys/admin-routes.js';
import adminCustomers from '../customers/admin-routes.js';
import adminPlans from '../plans/admin-routes.js';
import { createPlanRules } from '../plans/rules.js';
import { adminCustomerCredits, adminKeyCredits } from '../credits/admin-routes.js';
import { createCreditsRules } from '../credits/rules.js';
import { createCreditsRepository } from '../credits/repository.js';
import { createCustomersRepository } from '../customers/repository.js';
import { createCustomerRules } from '../customers/rules.js';
import { adminAddressBans, adminKeyUsage } from '../rate-limit/admin/admin-routes.js';
import adminWebhookDeliveries from '../webhooks/admin-routes.js';
import adminAudit from '../audit/admin-routes.js';
import adminUsage from '../usage/admin-routes.js';
import adminUsageExports from '../usage/admin-export-routes.js';
import { createUsageRepository } from '../usage/repository.js';
import { createUsageExportRules } from '../usage/rules.js';
import { recordUsageHours } from '../webhooks/plugin.js';
import { createWebhookDeliveriesRepository } from '../webhooks/repository.js';

export const ADMIN_PREFIX = '/admin/v1';

/** Admin bodies are a few fields; 4 KiB leaves room and pins no memory. */
const BODY_LIMIT = 4 * 1024;

/**
 * The admin API (key management for the systems that sell and support access) on a listener of
 * its own, apart from the API as the metrics are: never on the public port, never behind the
 * public balancer. It runs in the app's process on the app's database, repositories and rate
 * limiter, so a usage read or a lifted ban is the store the limiter decides from. Its own
 * OpenAPI document (/admin/v1/openapi.json) and docs page (/docs); every other route needs an
 * admin token. Close it before the app, whose database it uses.
 */
export async function buildAdminServer(app: FastifyInstance): Promise<FastifyInstance> {
  const { config, db } = app;
  const admin = Fastify({
    ...listenerOptions(config, TOKEN_IN_REQUEST_LOG),
    loggerInstance: app.log.child({ listener: 'admin' }),
    // Nothing stands in front of this listener whose request ids could be trusted.
    genReqId: requestIdGenerator([]),
    bodyLimit: BODY_LIMIT,
  });
  serveJson(admin);
  admin.decorate('config', config);
  admin.decorate('now', app.now);

  await admin.register(errorHandler);
  await admin.register(openapi, {
    info: {
      title: 'Pet store admin',
      version: '1.0.0',
      description:
        'Key management for the systems that sell and support access: issue, list, change, rotate and revoke API keys, manage the customers who own them and the prepaid credits of both, change the plans’ limits, ' +
        'read their usage and the usage record by hour or day, list and lift bans of keys and addresses, follow the usage events sent by webhook, and read the audit trail. Every error is an `Error` body `{code, message, status}`.',
    },
    serverUrl: ADMIN_PREFIX,
    apiPrefix: ADMIN_PREFIX,
    tags: [
      { name: 'keys', description: 'API keys, their usage and bans' },
      { name: 'customers', description: "The seller's customers, each known by its own id (externalId)" },
      { name: 'plans', description: 'The plans: the limits, concurrency and shadow mode of the keys of each' },
      { name: 'usage', description: 'The usage record: what each customer and key used, hour by hour, and what was refused' },
      { name: 'address bans', description: 'Client addresses banned for what was sent from them without a valid key' },
      { name: 'webhooks', description: 'Usage events sent to WEBHOOK_URL, and their deliveries' },
      { name: 'audit', description: 'Who changed what, and when' },
    ],
    securityScheme: {
      name: ADMIN_SECURITY_SCHEME,
      description:
        'An admin token (`psa_...`), sent as `Authorization: Bearer <admin token>`; made with `keys admin-token create`. ' +
        'The read scope may call the GET operations; the write scope all of them.',
    },
  });
  admin.get(`${ADMIN_PREFIX}/openapi.json`, { schema: { hide: true } }, async () => admin.swagger());

  const retentionHours = config.IDEMPOTENCY_KEY_RETENTION_HOURS;
  const audit = createAdminAuditRepository(db);
  // The operations, behind the admin token; the document and the docs page above are open to whoever reaches the listener.
  // The features declare them, in the document's order (the order of registration); changes are recorded as actorOf says.
  await admin.register(async (operations) => {
    operations.addHook('onRoute', (route) => documentAdminOperation(route, { retentionHours }));
    await operations.register(adminAuth, { tokens: createAdminTokensRepository(db) });
    await operations.register(idempotency, {
      retentionHours,
      keys: createIdempotencyKeysRepository(db, 'admin'),
      ownerOf: (request) => request.adminToken?.id,
    });
    const credits = createCreditsRepository(db);
    await operations.register(adminKeys, { keys: app.apiKeysRepository, rules: app.keyRules, credits, actorOf });
    const creditsRules = createCreditsRules(db, (holder, balance) => app.rateLimit.creditsSpent(holder, balance, app.now()));
    await operations.register(adminKeyCredits, { rules: creditsRules, actorOf });
    await operations.register(adminCustomers, { customers: createCustomerRules(db), actorOf, costs: config.rateLimitCosts });
    await operations.register(adminCustomerCredits, { rules: creditsRules, actorOf });
    await operations.register(adminPlans, { plans: createPlanRules(db, config.rateLimitCosts), actorOf });
    await operations.register(adminKeyUsage, { keys: app.apiKeysRepository, rateLimit: app.rateLimit, audit, actorOf });
    await operations.register(adminUsage, {
      usage: createUsageRepository(db),
      keys: app.apiKeysRepository,
      customers: createCustomersRepository(db),
    });
    await operations.register(adminUsageExports, {
      exports: config.usageExport && createUsageExportRules(db, recordUsageHours(db, config.usageExport.source)),
      customers: createCustomersRepository(db),
      actorOf,
      now: app.now,
    });
    await operations.register(adminAddressBans, { rateLimit: app.rateLimit, audit, actorOf });
    await operations.register(adminWebhookDeliveries, { deliveries: createWebhookDeliveriesRepository(db), audit, actorOf });
    await operations.register(adminAudit, { audit });
  });
  return admin;
}
