import { Type, type Static } from '@sinclair/typebox';
import { keyCache } from '../api-keys/settings.js';
import { idempotency } from '../idempotency/settings.js';
import { petsCache } from '../pets/settings.js';
import { database, databasePool } from '../platform/config/settings/database.js';
import {
  adminListener,
  connections,
  cors,
  listener,
  proxies,
  publicBaseUrl,
  shutdownAndLoadShedding,
} from '../platform/config/settings/http.js';
import { logs, metrics, tracing } from '../platform/config/settings/observability.js';
import { redis } from '../rate-limit/stores/redis-settings.js';
import { rateLimits } from '../rate-limit/settings.js';
import { usage } from '../usage/settings.js';
import { webhooks } from '../webhooks/settings.js';

/**
 * Every setting a user can make, read from the environment in one place: the platform's groups (platform/config/settings/)
 * and each feature's (its settings.ts). Each description is the setting's documentation: scripts/config-docs.ts writes
 * docs/configuration.md's table and .env.example from this schema (`examples` shows the shape a pattern asks for), in
 * the order of the properties here.
 */
export const ConfigSchema = Type.Object({
  ...listener,
  ...database,
  ...publicBaseUrl,
  ...logs,
  ...redis,
  ...rateLimits,
  ...webhooks,
  ...usage,
  ...keyCache,
  ...idempotency,
  ...proxies,
  ...cors,
  ...metrics,
  ...adminListener,
  ...connections,
  ...petsCache,
  ...tracing,
  ...databasePool,
  ...shutdownAndLoadShedding,
});

/** The settings as the schema checks them, before parsing (load.ts). */
export type Settings = Static<typeof ConfigSchema>;
