import { isIP } from 'node:net';
import type { Static, TObject, TProperties } from '@sinclair/typebox';
import { ExclusiveSettingsError, invalidSetting, redactPasswords, SettingNeedsError, SettingsTogetherError } from './errors.js';
import type { database } from './settings/database.js';
import type { rateLimits, webhooks } from './settings/features.js';
import type { redis } from './settings/redis.js';

// The settings whose values the schema checks only as text, parsed and checked here, a function per group
// of settings, so that no other code parses them again.

/** A group's settings as the schema checks them, with their defaults, before parsing: what the group's parser takes. */
export type SettingValues<Group extends TProperties> = Static<TObject<Group>>;

/** Where the shared rate-limit counters live: one Redis, a Redis Cluster, or a master that Sentinels name. */
export type RedisTarget =
  | { mode: 'single'; url: string }
  | { mode: 'cluster'; nodes: Array<{ host: string; port: number }> }
  | { mode: 'sentinel'; sentinels: Array<{ host: string; port: number }>; masterName: string };

/** AUTH and TLS for the cluster and Sentinel modes; a single Redis takes both from its URL (`rediss://user:pass@...`). */
export interface RedisCredentials {
  username?: string;
  password?: string;
  /** Sentinels' own password, when they require one. */
  sentinelPassword?: string;
  tls: boolean;
}

export interface WebhookSettings {
  /** WEBHOOK_URL without its user and password. */
  url: string;
  /** The Authorization header's value when WEBHOOK_URL holds a user or password: Basic with both. */
  authorization: string | undefined;
  secret: string;
  /** WEBHOOK_USAGE_THRESHOLDS: percentages, ascending. */
  usageThresholds: number[];
}

/** The most one operation may cost: RATE_LIMIT_COSTS's bound, far above what any plan would price a request at. */
const MAX_OPERATION_COST = 1000;
/** RATE_LIMIT_CONCURRENCY's bound, as the api_keys column's (migrations/012). */
const MAX_CONCURRENCY = 100_000;

/** DATABASE_REPLICA_URLS, one URL each; empty without it. */
export function databaseReplicaUrls(settings: SettingValues<typeof database>): string[] {
  if (settings.DATABASE_REPLICA_URLS !== undefined && settings.DATABASE_URL === undefined) {
    throw new SettingNeedsError(
      'DATABASE_REPLICA_URLS',
      'DATABASE_URL',
      'replicas are PostgreSQL streaming replicas of the primary DATABASE_URL names, and the embedded database (DATABASE_URL unset) has none',
    );
  }
  const urls = (settings.DATABASE_REPLICA_URLS ?? '')
    .split(',')
    .map((url) => url.trim())
    .filter(Boolean);
  // ioredis reads REDIS_URL, and the replicas' names come from their URLs, as WHATWG URLs: one that is
  // none would end the start in a stack trace quoting it whole, password and all.
  const notUrl = urls.find((url) => !URL.canParse(url));
  if (notUrl !== undefined) {
    throw invalidSetting(
      'DATABASE_REPLICA_URLS',
      settings.DATABASE_REPLICA_URLS!,
      `${JSON.stringify(redactPasswords(notUrl))} is not a URL`,
    );
  }
  return urls;
}

/** The REDIS_* settings: which Redis, if any, and how to reach its nodes. */
export function redisSettings(settings: SettingValues<typeof redis>): {
  redisTarget: RedisTarget | undefined;
  redisCredentials: RedisCredentials;
} {
  if (settings.REDIS_URL !== undefined && !URL.canParse(settings.REDIS_URL))
    throw invalidSetting('REDIS_URL', settings.REDIS_URL, 'not a URL');
  const redisModes = (['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'] as const).filter((name) => settings[name] !== undefined);
  if (redisModes.length > 1) throw new ExclusiveSettingsError(redisModes.join(' and '), 'they name different kinds of Redis');
  if ((settings.REDIS_SENTINELS === undefined) !== (settings.REDIS_SENTINEL_MASTER === undefined)) {
    throw new SettingsTogetherError('REDIS_SENTINELS and REDIS_SENTINEL_MASTER', 'the Sentinels and the name of the master they watch');
  }
  return {
    redisTarget: redisTarget(settings),
    redisCredentials: {
      username: settings.REDIS_USERNAME,
      password: settings.REDIS_PASSWORD,
      sentinelPassword: settings.REDIS_SENTINEL_PASSWORD,
      tls: settings.REDIS_TLS,
    },
  };
}

/** The WEBHOOK_* settings: where and how usage events are sent; undefined without WEBHOOK_URL. */
export function webhookSettings(settings: SettingValues<typeof webhooks>): WebhookSettings | undefined {
  if ((settings.WEBHOOK_URL === undefined) !== (settings.WEBHOOK_SECRET === undefined)) {
    throw new SettingsTogetherError(
      'WEBHOOK_URL and WEBHOOK_SECRET',
      'the receiver checks every event against the secret (at least 32 characters)',
    );
  }
  // The pattern takes `https://exa[mple.com`, which fetch would refuse at every attempt.
  if (settings.WEBHOOK_URL !== undefined && !URL.canParse(settings.WEBHOOK_URL))
    throw invalidSetting('WEBHOOK_URL', settings.WEBHOOK_URL, 'not a URL');
  const usageThresholds = settings.WEBHOOK_USAGE_THRESHOLDS.split(',').map(Number);
  if (usageThresholds.some((threshold, i) => threshold < 1 || threshold > 100 || threshold <= (usageThresholds[i - 1] ?? 0))) {
    throw invalidSetting('WEBHOOK_USAGE_THRESHOLDS', settings.WEBHOOK_USAGE_THRESHOLDS, 'percentages from 1 to 100, ascending, each once');
  }
  if (!settings.WEBHOOK_URL) return undefined;
  return { ...webhookTarget(settings.WEBHOOK_URL), secret: settings.WEBHOOK_SECRET!, usageThresholds };
}

/**
 * The RATE_LIMIT_* settings that name operations and plans, as values; the rate limiter checks the names
 * against its plans and operations (src/rate-limit/settings.ts).
 */
export function rateLimitSettings(settings: SettingValues<typeof rateLimits>) {
  const concurrency = settings.RATE_LIMIT_CONCURRENCY;
  return {
    rateLimitCosts: namedNumbers('RATE_LIMIT_COSTS', settings.RATE_LIMIT_COSTS, { max: MAX_OPERATION_COST, what: 'a cost' }),
    rateLimitShadowPlans: settings.RATE_LIMIT_SHADOW_PLANS.split(',').filter(Boolean),
    rateLimitConcurrency:
      concurrency === 'off' ? {} : namedNumbers('RATE_LIMIT_CONCURRENCY', concurrency, { max: MAX_CONCURRENCY, what: 'a limit' }),
  };
}

/**
 * WEBHOOK_URL's user and password as Basic authentication, and the URL without them: fetch refuses a URL that holds
 * them, with an error quoting it whole, which each attempt would record and log.
 */
function webhookTarget(written: string): Pick<WebhookSettings, 'url' | 'authorization'> {
  const url = new URL(written);
  if (!url.username && !url.password) return { url: url.href, authorization: undefined };
  let credentials: string;
  try {
    credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
  } catch {
    throw invalidSetting('WEBHOOK_URL', written, 'its user or password holds a % that starts no %-escape');
  }
  url.username = '';
  url.password = '';
  return { url: url.href, authorization: `Basic ${Buffer.from(credentials).toString('base64')}` };
}

/** Comma-separated addresses and CIDRs, each checked. */
export function addressesOf(setting: string, value: string): string[] {
  const entries = value
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean);
  const bad = entries.find((entry) => !isAddressOrCidr(entry));
  if (bad !== undefined) throw invalidSetting(setting, value, `${JSON.stringify(bad)} is not an IP address or CIDR`);
  return entries;
}

/** `name=number,...` pairs (their syntax checked by the schema's pattern), each name once, each number from 1 to `max`. */
function namedNumbers(setting: string, value: string, { max, what }: { max: number; what: string }): Record<string, number> {
  const numbers: Record<string, number> = {};
  for (const pair of value.split(',').filter(Boolean)) {
    const [name, digits] = pair.split('=') as [string, string];
    if (name in numbers) throw invalidSetting(setting, value, `${name} is named twice`);
    const number = Number(digits);
    if (number < 1 || number > max) throw invalidSetting(setting, value, `${name} is ${digits}; ${what} is from 1 to ${max}`);
    numbers[name] = number;
  }
  return numbers;
}

const hostPorts = (list: string) =>
  list.split(',').map((entry) => {
    const at = entry.lastIndexOf(':');
    return { host: entry.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: Number(entry.slice(at + 1)) };
  });

function redisTarget(settings: SettingValues<typeof redis>): RedisTarget | undefined {
  if (settings.REDIS_URL) return { mode: 'single', url: settings.REDIS_URL };
  if (settings.REDIS_CLUSTER_NODES) return { mode: 'cluster', nodes: hostPorts(settings.REDIS_CLUSTER_NODES) };
  if (settings.REDIS_SENTINELS && settings.REDIS_SENTINEL_MASTER) {
    return { mode: 'sentinel', sentinels: hostPorts(settings.REDIS_SENTINELS), masterName: settings.REDIS_SENTINEL_MASTER };
  }
  return undefined;
}

function isAddressOrCidr(entry: string): boolean {
  const [address = '', prefix, ...rest] = entry.split('/');
  const version = isIP(address);
  if (!version || rest.length > 0) return false;
  return prefix === undefined || (/^[0-9]{1,3}$/.test(prefix) && Number(prefix) <= (version === 4 ? 32 : 128));
}

/** PUBLIC_BASE_URL unset: the one HOST and PORT give. */
export function defaultBaseUrl(host: string, port: number): string {
  const reachable = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `http://${reachable}:${port}/v1`;
}
