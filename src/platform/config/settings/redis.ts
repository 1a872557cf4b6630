import { Type } from '@sinclair/typebox';

// The Redis the instances share their rate-limit counters in: one, a cluster, or Sentinels.
// Each description is the setting's documentation (see schema.ts).

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
