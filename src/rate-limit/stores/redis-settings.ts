import { Type } from '@sinclair/typebox';
import { ExclusiveSettingsError, invalidSetting, SettingsTogetherError } from '../../platform/config/errors.js';
import type { SettingValues } from '../../platform/config/parsers.js';

// The Redis the instances share their rate-limit counters in: one, a cluster, or Sentinels: the settings,
// each description the setting's documentation (src/config/schema.ts), and their parser.

/** `host:port,host:port,...`, an IPv6 address in brackets. */
const HOST_PORT = '(\\[[0-9A-Fa-f:.]+\\]|[^,:\\s[\\]]+):[0-9]{1,5}';
const HOST_PORT_LIST = `^${HOST_PORT}(,${HOST_PORT})*$`;

/** Which Redis, its credentials and TLS, and the prefix of its keys. */
export const redis = {
  REDIS_URL: Type.Optional(
    Type.String({
      pattern: '^rediss?://',
      examples: ['redis://redis:6379'],
      description:
        'The one Redis all instances share for rate limiting (`rediss://` for TLS, `redis://user:password@host:port` for AUTH). ' +
        'Unset, and no cluster or Sentinels: each instance counts alone. At most one of `REDIS_URL`, `REDIS_CLUSTER_NODES` ' +
        'and `REDIS_SENTINELS`.',
    }),
  ),
  REDIS_CLUSTER_NODES: Type.Optional(
    Type.String({
      pattern: HOST_PORT_LIST,
      examples: ['redis-1:6379,redis-2:6379,[fd00::3]:6379'],
      description: 'A Redis Cluster instead: seed nodes, any few masters or replicas (the rest is discovered).',
    }),
  ),
  REDIS_SENTINELS: Type.Optional(
    Type.String({
      pattern: HOST_PORT_LIST,
      examples: ['sentinel-1:26379,sentinel-2:26379,sentinel-3:26379'],
      description: 'A Sentinel-managed Redis instead: the Sentinels; with `REDIS_SENTINEL_MASTER`.',
    }),
  ),
  REDIS_SENTINEL_MASTER: Type.Optional(
    Type.String({
      minLength: 1,
      description: 'The name the Sentinels monitor the master under (`sentinel monitor <name> ...`); with `REDIS_SENTINELS`.',
    }),
  ),
  REDIS_USERNAME: Type.Optional(
    Type.String({
      minLength: 1,
      description: 'ACL user for the nodes of a cluster or a Sentinel-managed master (with `REDIS_URL`, put it in the URL).',
    }),
  ),
  REDIS_PASSWORD: Type.Optional(
    Type.String({
      minLength: 1,
      description: 'Password (AUTH) for the nodes of a cluster or a Sentinel-managed master (with `REDIS_URL`, put it in the URL).',
    }),
  ),
  REDIS_SENTINEL_PASSWORD: Type.Optional(
    Type.String({ minLength: 1, description: 'Password of the Sentinels themselves, when they require one.' }),
  ),
  REDIS_TLS: Type.Boolean({
    default: false,
    description:
      "`true`: TLS to the nodes of a cluster, or to the master and the Sentinels (with `REDIS_URL`, use `rediss://`); extra CAs through Node's `NODE_EXTRA_CA_CERTS`.",
  }),
  REDIS_KEY_PREFIX: Type.String({
    default: 'pets:',
    description: 'Prefix of every Redis key; give each deployment sharing a Redis its own (key ids repeat across databases).',
  }),
};

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
