import { isIP } from 'node:net';
import type { Static, TObject, TProperties } from '@sinclair/typebox';
import { invalidSetting, redactPasswords, SettingNeedsError } from './errors.js';
import type { database } from './settings/database.js';
import { originProblem } from '../schemas/origin.js';

// The platform's settings whose values the schema checks only as text, parsed and checked here, a function per
// group of settings, so that no other code parses them again; each feature parses its own in its settings.ts.

/** A group's settings as the schema checks them, with their defaults, before parsing: what the group's parser takes. */
export type SettingValues<Group extends TProperties> = Static<TObject<Group>>;

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

/** Comma-separated percentages (the schema's pattern let only digits and commas through), each 1 to 100, ascending, each once. */
export function percentagesOf(setting: string, value: string): number[] {
  const percentages = value.split(',').map(Number);
  if (percentages.some((percentage, i) => percentage < 1 || percentage > 100 || percentage <= (percentages[i - 1] ?? 0))) {
    throw invalidSetting(setting, value, 'percentages from 1 to 100, ascending, each once');
  }
  return percentages;
}

/** PUBLIC_BASE_URL unset: the one HOST and PORT give. */
export function defaultBaseUrl(host: string, port: number): string {
  const reachable = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `http://${reachable}:${port}/v1`;
}

/** CORS_ORIGINS: any origin, the listed ones, or off (no CORS at all). */
export type CorsOrigins = '*' | 'off' | string[];

/** CORS_ORIGINS parsed: `*`, `off`, or its origins, each as a browser sends it. */
export function corsOriginsOf(value: string): CorsOrigins {
  const trimmed = value.trim();
  if (trimmed === '*' || trimmed === 'off') return trimmed;
  const origins = trimmed
    .split(',')
    .map((origin) => origin.trim())
    .filter(Boolean);
  if (origins.length === 0) throw invalidSetting('CORS_ORIGINS', value, 'must be *, off, or a comma-separated list of origins');
  for (const origin of origins) {
    const problem = originProblem(origin);
    if (problem) throw invalidSetting('CORS_ORIGINS', value, redactPasswords(problem));
  }
  return origins;
}
