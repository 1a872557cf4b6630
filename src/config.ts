import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { isIP } from 'node:net';

/** Every setting a user can make, read from the environment in one place. */
export const ConfigSchema = Type.Object({
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000 }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  DATA_DIR: Type.String({ minLength: 1, default: './data' }),
  PUBLIC_BASE_URL: Type.Optional(Type.String({ pattern: '^https?://[^/]+(/.*)?/v1$' })),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info' },
  ),
  /** Shared rate-limit counters for several instances; unset, each instance counts alone. */
  REDIS_URL: Type.Optional(Type.String({ pattern: '^rediss?://' })),
  /** Prefix of every Redis key, so several deployments can share one Redis. */
  REDIS_KEY_PREFIX: Type.String({ default: 'pets:' }),
  /** More refused requests than this within one minute window ban the caller. */
  RATE_LIMIT_BAN_THRESHOLD: Type.Integer({ minimum: 1, default: 30 }),
  RATE_LIMIT_BAN_SECONDS: Type.Integer({ minimum: 1, default: 900 }),
  /** API keys each instance keeps in memory at most (the recently used ones); memory follows this, not the number of keys. */
  KEY_CACHE_MAX_ENTRIES: Type.Integer({ minimum: 1, default: 100_000 }),
  /** How long an Idempotency-Key and the response it stored are kept; at least the 24 hours clients are promised. */
  IDEMPOTENCY_KEY_RETENTION_HOURS: Type.Integer({ minimum: 24, default: 24 }),
  /** Comma-separated addresses or CIDRs of the proxies whose X-Forwarded-For is believed. */
  TRUST_PROXY: Type.String({ default: '' }),
  /** Prometheus metrics are served apart from the API, on this port (0: any free port). */
  METRICS_PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 9464 }),
  METRICS_HOST: Type.String({ minLength: 1, default: '127.0.0.1' }),
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
  /** Connections each instance opens to PostgreSQL at most. */
  DB_POOL_SIZE: Type.Integer({ minimum: 1, default: 10 }),
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
    throw new ConfigError(`Invalid ${name}=${JSON.stringify(env[name] ?? '')}: ${error.message}`);
  }
  const config = values as Static<typeof ConfigSchema>;
  const badProxy = trustedProxies(config.TRUST_PROXY).find((entry) => !isAddressOrCidr(entry));
  if (badProxy !== undefined) {
    throw new ConfigError(`Invalid TRUST_PROXY=${JSON.stringify(config.TRUST_PROXY)}: ${JSON.stringify(badProxy)} is not an IP address or CIDR`);
  }
  return { ...config, PUBLIC_BASE_URL: config.PUBLIC_BASE_URL ?? defaultBaseUrl(config.HOST, config.PORT) };
}

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
