import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { invalidSetting } from '../platform/config/errors.js';
import { addressesOf, corsOriginsOf, databaseReplicaUrls, defaultBaseUrl, type CorsOrigins } from '../platform/config/parsers.js';
import { redisSettings, type RedisCredentials, type RedisTarget } from '../rate-limit/stores/redis-settings.js';
import { rateLimitSettings } from '../rate-limit/settings.js';
import { usageExportSettings, type UsageExportSettings } from '../usage/settings.js';
import { webhookSettings, type WebhookSettings } from '../webhooks/settings.js';
import { ConfigSchema, type Settings } from './schema.js';

/**
 * The settings parsed (platform/config/parsers.ts, the features' settings.ts) into the values of Config below, so that
 * no other code parses them again.
 */
const PARSED_SETTINGS = [
  'PUBLIC_BASE_URL',
  'DATABASE_REPLICA_URLS',
  'TRUST_PROXY',
  'CORS_ORIGINS',
  'TRACING_TRUSTED_PARENTS',
  'REDIS_URL',
  'REDIS_CLUSTER_NODES',
  'REDIS_SENTINELS',
  'REDIS_SENTINEL_MASTER',
  'REDIS_USERNAME',
  'REDIS_PASSWORD',
  'REDIS_SENTINEL_PASSWORD',
  'REDIS_TLS',
  'RATE_LIMIT_COSTS',
  'RATE_LIMIT_SHADOW_PLANS',
  'RATE_LIMIT_CONCURRENCY',
  'WEBHOOK_URL',
  'WEBHOOK_SECRET',
  'WEBHOOK_USAGE_THRESHOLDS',
  'CREDITS_LOW_THRESHOLDS',
] as const;

/** The settings, checked, with those that need parsing parsed. */
export type Config = Omit<Settings, (typeof PARSED_SETTINGS)[number]> & {
  /** PUBLIC_BASE_URL, or the one HOST and PORT give. */
  PUBLIC_BASE_URL: string;
  /** DATABASE_REPLICA_URLS, one URL each; empty: every read on the primary. */
  databaseReplicaUrls: string[];
  /** TRUST_PROXY's addresses and CIDRs: Fastify's trustProxy, and the proxies whose X-Request-Id is kept. */
  trustedProxies: string[];
  /** CORS_ORIGINS: the origins whose pages may call the API, `*` for any, `off` for no CORS. */
  corsOrigins: CorsOrigins;
  /** TRACING_TRUSTED_PARENTS' addresses and CIDRs: the callers whose `traceparent` decides sampling. */
  tracingTrustedParents: string[];
  /** Where the shared rate-limit counters live, if anywhere. */
  redisTarget: RedisTarget | undefined;
  redisCredentials: RedisCredentials;
  /** RATE_LIMIT_COSTS: units by operationId, for the operations it names. */
  rateLimitCosts: Record<string, number>;
  /** RATE_LIMIT_SHADOW_PLANS: the plans whose keys are served past their limits (the rate limiter checks the names). */
  rateLimitShadowPlans: string[];
  /** RATE_LIMIT_CONCURRENCY: requests in flight per key, by plan, for the plans it names (the rate limiter checks the names). */
  /** RATE_LIMIT_CONCURRENCY: by plan, every plan not named without one; null when unset (the plans' rows decide). */
  rateLimitConcurrency: Record<string, number> | null;
  /** Where and how usage events are sent; undefined without WEBHOOK_URL. */
  webhooks: WebhookSettings | undefined;
  /** USAGE_EXPORT and its settings: how the usage record is sent as usage.hourly events; undefined when off. */
  usageExport: UsageExportSettings | undefined;
};

/** TypeBox converts with parseInt, which reads `1e6` as 1 and `3.2e7` as 3: these take plain digits only. */
const INTEGER_SETTINGS = Object.entries(ConfigSchema.properties)
  .filter(([, schema]) => schema.type === 'integer')
  .map(([name]) => name);

/** Validates the environment; throws an error of code PETSTORE_CONFIG (platform/config/errors.ts) naming the first bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const settings = checkedSettings(env);
  const trustedProxies = addressesOf('TRUST_PROXY', settings.TRUST_PROXY);
  const tracingTrustedParents = addressesOf('TRACING_TRUSTED_PARENTS', settings.TRACING_TRUSTED_PARENTS);
  if (settings.ADMIN_PORT !== undefined && settings.ADMIN_PORT !== 0 && settings.ADMIN_PORT === settings.PORT) {
    throw invalidSetting(
      'ADMIN_PORT',
      String(settings.ADMIN_PORT),
      "it is the API's PORT; the admin API is never served on the public port",
    );
  }
  const replicaUrls = databaseReplicaUrls(settings);
  const redis = redisSettings(settings);
  const webhooks = webhookSettings(settings);
  const usageExport = usageExportSettings(settings);
  const rateLimits = rateLimitSettings(settings);
  const unparsed = Object.fromEntries(
    Object.entries(settings).filter(([name]) => !(PARSED_SETTINGS as readonly string[]).includes(name)),
  ) as Omit<Settings, (typeof PARSED_SETTINGS)[number]>;
  return {
    ...unparsed,
    PUBLIC_BASE_URL: settings.PUBLIC_BASE_URL ?? defaultBaseUrl(settings.HOST, settings.PORT),
    databaseReplicaUrls: replicaUrls,
    trustedProxies,
    corsOrigins: corsOriginsOf(settings.CORS_ORIGINS),
    tracingTrustedParents,
    ...redis,
    ...rateLimits,
    webhooks,
    usageExport,
  };
}

/** The environment's settings as the schema checks them, with their defaults. */
function checkedSettings(env: Record<string, string | undefined>): Settings {
  const known = Object.fromEntries(
    Object.keys(ConfigSchema.properties)
      .filter((key) => env[key] !== undefined && env[key] !== '')
      .map((key) => [key, env[key]]),
  );
  const notInteger = INTEGER_SETTINGS.find((name) => name in known && !/^-?[0-9]+$/.test(known[name]!));
  if (notInteger) throw invalidSetting(notInteger, known[notInteger]!, 'must be a whole number in plain digits');
  const values = Value.Default(ConfigSchema, Value.Convert(ConfigSchema, known));
  const error = Value.Errors(ConfigSchema, values).First();
  if (error) {
    const name = error.path.slice(1);
    throw invalidSetting(name, env[name] ?? '', allowedValues(error.schema) ?? error.message);
  }
  return values as Settings;
}

/** "must be one of ..." for a setting that takes one of a few words: TypeBox alone says "Expected union value". */
function allowedValues(schema: TSchema): string | undefined {
  if (schema.type === 'boolean') return 'must be true or false';
  const words = (schema.anyOf as TSchema[] | undefined)?.map((option): unknown => option.const);
  return words?.every((word) => typeof word === 'string') ? `must be one of ${words.join(', ')}` : undefined;
}
