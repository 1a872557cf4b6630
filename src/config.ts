import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { isIP } from 'node:net';
import type { RedisCredentials, RedisTarget } from './plugins/rate-limit/redis-connection.js';

/** `host:port,host:port,...`, an IPv6 address in brackets. */
const HOST_PORT = '(\\[[0-9A-Fa-f:.]+\\]|[^,:\\s[\\]]+):[0-9]{1,5}';
const HOST_PORT_LIST = `^${HOST_PORT}(,${HOST_PORT})*$`;

/** Every setting a user can make, read from the environment in one place. */
export const ConfigSchema = Type.Object({
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000 }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  /**
   * Where LISTEN goes, which needs a session of its own: a direct or session-pooled address when
   * DATABASE_URL is a transaction pooler. Unset: DATABASE_URL.
   */
  DATABASE_LISTEN_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  /** Named prepared statements, parsed once per connection; false behind a pooler that cannot keep them. */
  DATABASE_PREPARED_STATEMENTS: Type.Boolean({ default: true }),
  DATA_DIR: Type.String({ minLength: 1, default: './data' }),
  PUBLIC_BASE_URL: Type.Optional(Type.String({ pattern: '^https?://[^/]+(/.*)?/v1$' })),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info' },
  ),
  /** `auto`: pretty-printed when standard output is a terminal, JSON lines otherwise. */
  LOG_FORMAT: Type.Union([Type.Literal('auto'), Type.Literal('json'), Type.Literal('pretty')], { default: 'auto' }),
  /**
   * Shared rate-limit counters for several instances; unset, each instance counts alone. One Redis
   * (REDIS_URL, `rediss://` for TLS, credentials in the URL), a Redis Cluster (REDIS_CLUSTER_NODES:
   * seed nodes), or a Sentinel-managed master (REDIS_SENTINELS and REDIS_SENTINEL_MASTER); one of them.
   */
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://' })),
  REDIS_CLUSTER_NODES: Type.Optional(Type.String({ pattern: HOST_PORT_LIST })),
  REDIS_SENTINELS: Type.Optional(Type.String({ pattern: HOST_PORT_LIST })),
  REDIS_SENTINEL_MASTER: Type.Optional(Type.String({ minLength: 1 })),
  /** AUTH (ACL user and password) and TLS for the nodes of a cluster or of a Sentinel-managed master. */
  REDIS_USERNAME: Type.Optional(Type.String({ minLength: 1 })),
  REDIS_PASSWORD: Type.Optional(Type.String({ minLength: 1 })),
  REDIS_SENTINEL_PASSWORD: Type.Optional(Type.String({ minLength: 1 })),
  REDIS_TLS: Type.Boolean({ default: false }),
  /** Prefix of every Redis key, so several deployments can share one Redis. */
  REDIS_KEY_PREFIX: Type.String({ default: 'pets:' }),
  /** More refused requests than this within one minute window ban the caller. */
  RATE_LIMIT_BAN_THRESHOLD: Type.Integer({ minimum: 1, default: 30 }),
  RATE_LIMIT_BAN_SECONDS: Type.Integer({ minimum: 1, default: 900 }),
  /** Callers without a valid key are counted per IPv6 network of this many leading bits (IPv4: per address). */
  RATE_LIMIT_IPV6_PREFIX: Type.Integer({ minimum: 1, maximum: 128, default: 64 }),
  /** API keys each instance keeps in memory at most (the recently used ones); memory follows this, not the number of keys. */
  KEY_CACHE_MAX_ENTRIES: Type.Integer({ minimum: 1, default: 100_000 }),
  /** How long an Idempotency-Key and the response it stored are kept; at least the 24 hours clients are promised. */
  IDEMPOTENCY_KEY_RETENTION_HOURS: Type.Integer({ minimum: 24, default: 24 }),
  /** Comma-separated addresses or CIDRs of the proxies whose X-Forwarded-For is believed. */
  TRUST_PROXY: Type.String({ default: '' }),
  /** Prometheus metrics are served apart from the API, on this port (0: any free port). */
  METRICS_PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 9464 }),
  METRICS_HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  /** The admin API (key management) listens on this port of its own, never the API's; unset, it is off. */
  ADMIN_PORT: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535 })),
  ADMIN_HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  /** Slow or stalled clients are cut off: all headers within this time... */
  HEADERS_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 10_000 }),
  /** ...the whole request within this time... */
  REQUEST_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 30_000 }),
  /** ...and a socket that sends and reads nothing for this long is closed. */
  IDLE_TIMEOUT_MS: Type.Integer({ minimum: 100, default: 60_000 }),
  /** Open client connections one instance accepts at most; past it, new ones are refused. */
  MAX_CONNECTIONS: Type.Integer({ minimum: 1, default: 10_000 }),
  /** Bytes of pets and listing pages each instance caches at most; 0 turns the cache off. */
  PETS_CACHE_MAX_BYTES: Type.Integer({ minimum: 0, default: 32 * 1024 * 1024 }),
  /**
   * Tracing: spans go over OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or to
   * OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (the OTLP exporter specification's rule); neither set,
   * no tracing and nothing of OpenTelemetry loaded.
   */
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://' })),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(Type.String({ pattern: '^https?://' })),
  /** The service.name of every span. */
  OTEL_SERVICE_NAME: Type.String({ minLength: 1, default: 'pet-store' }),
  /** Connections each instance opens to PostgreSQL at most. */
  DB_POOL_SIZE: Type.Integer({ minimum: 1, default: 10 }),
  /**
   * SIGTERM: /readyz answers 503 and everything else is still served for this long, then the
   * server closes. At least as long as a balancer takes to stop sending here (see the README).
   */
  SHUTDOWN_DRAIN_MS: Type.Integer({ minimum: 0, maximum: 120_000, default: 5_000 }),
  /** Overload: shed requests with 503 when the event loop lags longer than this... */
  LOAD_SHED_EVENT_LOOP_DELAY_MS: Type.Integer({ minimum: 1, default: 1000 }),
  /** ...or when more requests than this wait for a database connection. */
  LOAD_SHED_POOL_WAITING: Type.Integer({ minimum: 1, default: 100 }),
});

export type Config = Omit<Static<typeof ConfigSchema>, 'PUBLIC_BASE_URL'> & { PUBLIC_BASE_URL: string };

export class ConfigError extends Error {}

/** Validates the environment; throws a ConfigError naming the first bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const known = Object.fromEntries(
    Object.keys(ConfigSchema.properties)
      .filter((key) => env[key] !== undefined && env[key] !== '')
      .map((key) => [key, env[key]]),
  );
  const values = Value.Default(ConfigSchema, Value.Convert(ConfigSchema, known));
  const error = Value.Errors(ConfigSchema, values).First();
  if (error) {
    const name = error.path.slice(1);
    throw new ConfigError(`Invalid ${name}=${JSON.stringify(env[name] ?? '')}: ${allowedValues(error.schema) ?? error.message}`);
  }
  const config = values as Static<typeof ConfigSchema>;
  const badProxy = trustedProxies(config.TRUST_PROXY).find((entry) => !isAddressOrCidr(entry));
  if (badProxy !== undefined) {
    throw new ConfigError(
      `Invalid TRUST_PROXY=${JSON.stringify(config.TRUST_PROXY)}: ${JSON.stringify(badProxy)} is not an IP address or CIDR`,
    );
  }
  if (config.ADMIN_PORT !== undefined && config.ADMIN_PORT !== 0 && config.ADMIN_PORT === config.PORT) {
    throw new ConfigError(
      `Invalid ADMIN_PORT=${config.ADMIN_PORT}: it is the API's PORT; the admin API is never served on the public port`,
    );
  }
  const redisModes = (['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'] as const).filter((name) => config[name] !== undefined);
  if (redisModes.length > 1) throw new ConfigError(`Set one of ${redisModes.join(' and ')}, not both: they name different kinds of Redis`);
  if ((config.REDIS_SENTINELS === undefined) !== (config.REDIS_SENTINEL_MASTER === undefined)) {
    throw new ConfigError('REDIS_SENTINELS and REDIS_SENTINEL_MASTER go together: the Sentinels and the name of the master they watch');
  }
  return { ...config, PUBLIC_BASE_URL: config.PUBLIC_BASE_URL ?? defaultBaseUrl(config.HOST, config.PORT) };
}

/** "must be one of ..." for a setting that takes one of a few words: TypeBox alone says "Expected union value". */
function allowedValues(schema: TSchema): string | undefined {
  if (schema.type === 'boolean') return 'must be true or false';
  const words = (schema.anyOf as TSchema[] | undefined)?.map((option): unknown => option.const);
  return words?.every((word) => typeof word === 'string') ? `must be one of ${words.join(', ')}` : undefined;
}

const hostPorts = (list: string) =>
  list.split(',').map((entry) => {
    const at = entry.lastIndexOf(':');
    return { host: entry.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: Number(entry.slice(at + 1)) };
  });

/** Where the shared rate-limit counters live, if anywhere. */
export function redisTarget(config: Config): RedisTarget | undefined {
  if (config.REDIS_URL) return { mode: 'single', url: config.REDIS_URL };
  if (config.REDIS_CLUSTER_NODES) return { mode: 'cluster', nodes: hostPorts(config.REDIS_CLUSTER_NODES) };
  if (config.REDIS_SENTINELS && config.REDIS_SENTINEL_MASTER) {
    return { mode: 'sentinel', sentinels: hostPorts(config.REDIS_SENTINELS), masterName: config.REDIS_SENTINEL_MASTER };
  }
  return undefined;
}

export const redisCredentials = (config: Config): RedisCredentials => ({
  username: config.REDIS_USERNAME,
  password: config.REDIS_PASSWORD,
  sentinelPassword: config.REDIS_SENTINEL_PASSWORD,
  tls: config.REDIS_TLS,
});

export const trustedProxies = (value: string) =>
  value
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean);

function isAddressOrCidr(entry: string): boolean {
  const [address = '', prefix, ...rest] = entry.split('/');
  const version = isIP(address);
  if (!version || rest.length > 0) return false;
  return prefix === undefined || (/^[0-9]{1,3}$/.test(prefix) && Number(prefix) <= (version === 4 ? 32 : 128));
}

function defaultBaseUrl(host: string, port: number): string {
  const reachable = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `http://${reachable}:${port}/v1`;
}
