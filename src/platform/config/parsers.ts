import { isIP } from 'node:net';
import type { Static, TObject, TProperties } from '@sinclair/typebox';
import { invalidSetting, redactPasswords, SettingNeedsError, SettingsTogetherError } from './errors.js';
import type { database } from './settings/database.js';
import type { webhooks } from './settings/features.js';

// The settings whose values the schema checks only as text, parsed and checked here, a function per group
// of settings, so that no other code parses them again.

/** A group's settings as the schema checks them, with their defaults, before parsing: what the group's parser takes. */
export type SettingValues<Group extends TProperties> = Static<TObject<Group>>;

export interface WebhookSettings {
  /** WEBHOOK_URL without its user and password. */
  url: string;
  /** The Authorization header's value when WEBHOOK_URL holds a user or password: Basic with both. */
  authorization: string | undefined;
  secret: string;
  /** WEBHOOK_USAGE_THRESHOLDS: percentages, ascending. */
  usageThresholds: number[];
}

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
