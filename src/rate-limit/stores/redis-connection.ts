import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { RedisCredentials, RedisTarget } from './redis-settings.js';

const CLUSTER_SLOTS = 16_384;

/** How long start-up waits for Redis; past it, the instance starts counting in memory (see fallback-store.ts). */
export const REDIS_START_WAIT_MS = 5_000;

/** How long one decision may wait for Redis before this instance decides from memory instead. */
const COMMAND_TIMEOUT_MS = 500;

// Fail fast instead of queueing while Redis is away: the caller then decides from memory.
const FAIL_FAST: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: COMMAND_TIMEOUT_MS,
  lazyConnect: true,
};

/**
 * A cluster's failover takes up to cluster-node-timeout (15 s by default) and a few seconds more:
 * ioredis keeps following redirections for retryDelayOnFailover x maxRedirections (20 s), so it
 * learns the new topology by itself; meanwhile each decision gives up after COMMAND_TIMEOUT_MS.
 */
const CLUSTER_FAILOVER: Pick<
  ClusterOptions,
  'retryDelayOnFailover' | 'maxRedirections' | 'retryDelayOnClusterDown' | 'retryDelayOnTryAgain'
> = {
  retryDelayOnFailover: 400,
  maxRedirections: 50,
  retryDelayOnClusterDown: 400,
  retryDelayOnTryAgain: 200,
};

/** Reconnects after a READONLY reply: the node was demoted (a failover the client has not noticed yet). */
const reconnectIfDemoted = (error: Error) => (error.message.startsWith('READONLY') ? 2 : false);

/** A client for the target, not yet connected; every mode fails fast rather than queueing. */
export function createRedisClient(target: RedisTarget, credentials: RedisCredentials): Redis | Cluster {
  const auth = { username: credentials.username, password: credentials.password, ...(credentials.tls && { tls: {} }) };
  switch (target.mode) {
    case 'single':
      // Concurrent decisions leave in one write (auto-pipelining), not one each.
      return new Redis(target.url, { ...FAIL_FAST, enableAutoPipelining: true, reconnectOnError: reconnectIfDemoted });
    case 'cluster':
      // No auto-pipelining: a pipeline that meets MOVED during a resharding or failover fails as a
      // whole (ioredis #2075), where single commands follow the redirection.
      return new Cluster(target.nodes, {
        ...CLUSTER_FAILOVER,
        enableOfflineQueue: false,
        lazyConnect: true,
        scaleReads: 'master',
        slotsRefreshTimeout: 2_000,
        // Managed clusters (ElastiCache) announce names whose TLS certificates match them as given.
        ...(credentials.tls && { dnsLookup: (address, callback) => callback(null, address) }),
        redisOptions: { ...FAIL_FAST, ...auth, reconnectOnError: reconnectIfDemoted },
      });
    case 'sentinel':
      return new Redis({
        ...FAIL_FAST,
        ...auth,
        sentinels: target.sentinels,
        name: target.masterName,
        role: 'master',
        sentinelPassword: credentials.sentinelPassword,
        // TLS to the Sentinels (sentinelTLS) and to the master they name (enableTLSForSentinelMode with tls).
        enableTLSForSentinelMode: credentials.tls,
        ...(credentials.tls && { sentinelTLS: {} }),
        // Subscribes to the Sentinels' +switch-master and moves at once, instead of at the next error.
        failoverDetector: true,
        enableAutoPipelining: true,
        reconnectOnError: reconnectIfDemoted,
      });
  }
}

/**
 * Whether every node decisions may reach answers now: the master of every slot of a cluster, as
 * the cluster maps them (a dead master keeps its slots until its replica is promoted; counting
 * resumed before that would fail again at once), or the one Redis.
 */
export async function pingAll(client: Redis | Cluster): Promise<void> {
  if (client instanceof Cluster) {
    // No command reaches the cluster while this instance counts from memory, so nothing else would
    // show the client the promoted master.
    await new Promise<void>((resolve, reject) => client.refreshSlotsCache((error) => (error ? reject(error) : resolve())));
    const nodes = new Map(client.nodes('master').map((node) => [`${node.options.host}:${node.options.port}`, node]));
    const owners = new Set(Array.from({ length: CLUSTER_SLOTS }, (_, slot) => client.slots[slot]?.[0]));
    if (owners.has(undefined)) throw new Error('a Redis Cluster slot has no known master');
    await Promise.all(
      [...owners].map((owner) => {
        const node = nodes.get(owner!);
        return node ? node.ping() : Promise.reject(new Error(`Redis Cluster master ${owner} is not connected`));
      }),
    );
  } else {
    await client.ping();
  }
}
