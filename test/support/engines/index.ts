/**
 * Real engines for the tests of issue #20 ("production at scale, proven on the real engines"), each
 * started privately on free loopback ports in a temporary directory, with PIDs for failover tests,
 * and a close() that leaves nothing running. The packages: .ci/install-engines.sh.
 */
export { startRedisCluster, type RedisCluster, type ClusterOptions, type ClusterNode, type ClusterNodeState } from './redis-cluster.js';
export { startSentinel, type SentinelSetup, type SentinelOptions, type SwitchEvent } from './sentinel.js';
export { startPgBouncer, type PgBouncer, type PgBouncerOptions } from './pgbouncer.js';
export { startPrimaryWithStandby, type PrimaryWithStandby, type PostgresNode } from './postgres-standby.js';
export { startNginx, NGINX_TEMPLATE, type Nginx, type NginxOptions } from './nginx.js';
export { findProgram } from './daemon.js';
export { describeNeeding, NEEDS } from './requirements.js';
