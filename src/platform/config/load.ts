import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { isIP } from 'node:net';
import { ConfigError } from '../domain-errors.js';

/** `host:port,host:port,...`, an IPv6 address in brackets. */
const HOST_PORT = '(\\[[0-9A-Fa-f:.]+\\]|[^,:\\s[\\]]+):[0-9]{1,5}';
const HOST_PORT_LIST = `^${HOST_PORT}(,${HOST_PORT})*$`;

/**
 * Every setting a user can make, read from the environment in one place. Each description is the
 * setting's documentation: scripts/config-docs.ts writes docs/configuration.md's table and
 * .env.example from this schema (`examples` shows the shape a pattern asks for).
 */
export const ConfigSchema = Type.Object({
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000, description: 'Port the API listens on; `0`: any free port.' }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'Address the API listens on; `0.0.0.0` in containers.' }),
  DATABASE_URL: Type.Optional(
    Type.String({
      pattern: '^postgres(ql)?://',
      examples: ['postgres://pets:secret@db:5432/pets'],
      description: 'The PostgreSQL database. Unset: the embedded PGlite database in `DATA_DIR`.',
    }),
  ),
  DATABASE_LISTEN_URL: Type.Optional(
    Type.String({
      pattern: '^postgres(ql)?://',
      examples: ['postgres://pets:secret@db-direct:5432/pets'],
      description:
        'Where LISTEN (change notices) connects. It needs a session of its own, so when `DATABASE_URL` is a transaction ' +
        'pooler, a direct or session-pooled address of the same database. Unset: `DATABASE_URL`.',
    }),
  ),
  DATABASE_REPLICA_URLS: Type.Optional(
    Type.String({
      pattern: '^\\s*postgres(ql)?://[^,]+(,\\s*postgres(ql)?://[^,]+)*$',
      examples: ['postgres://pets:secret@db-replica-1:5432/pets,postgres://pets:secret@db-replica-2:5432/pets'],
      description:
        'PostgreSQL streaming replicas that serve reads of pets (lists and `GET /v1/pets/{petId}`), comma-separated: each ' +
        "replica's own address, or one reader endpoint of a single replica. A read goes to a replica only once it has " +
        'replayed every change this instance knows of; otherwise, and for everything else (writes, change notices, API keys, ' +
        'idempotency, the admin API), the primary. Only with `DATABASE_URL`. Unset: every read on the primary.',
    }),
  ),
  DATABASE_REPLICA_MAX_LAG_MS: Type.Integer({
    minimum: 100,
    default: 5_000,
    description:
      'A replica that has been behind the primary for longer than this (or cannot be reached) takes no reads until it has ' +
      'caught up; with `DATABASE_REPLICA_URLS`.',
  }),
  DATABASE_REPLICA_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    default: 1_000,
    description:
      'How long a read waits for a replica: for a connection, and then for its answer. Past it (a replica that stopped ' +
      'answering) the read is asked of the primary, and the replica takes no reads until it answers a poll again; with ' +
      '`DATABASE_REPLICA_URLS`.',
  }),
  DATABASE_PREPARED_STATEMENTS: Type.Boolean({
    default: true,
    description:
      'Named prepared statements, parsed once per connection; `false` behind a transaction pooler that cannot keep them ' +
      '(PgBouncer before 1.21, or with `max_prepared_statements = 0`).',
  }),
  DATA_DIR: Type.String({
    minLength: 1,
    default: './data',
    description: 'Directory of the embedded database (when `DATABASE_URL` is unset); `memory://` for a throwaway one.',
  }),
  PUBLIC_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://[^/]+(/.*)?/v1$',
      examples: ['https://api.example.com/v1'],
      description:
        'The absolute base clients see, ending in `/v1`: every `Location` and `Link` and the OpenAPI `servers` use it. ' +
        'Unset: `http://{HOST}:{PORT}/v1` (`localhost` for `0.0.0.0` and `::`).',
    }),
  ),
  LOG_LEVEL: Type.Union(
    ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((level) => Type.Literal(level)),
    { default: 'info', description: 'The least severe level logged; `silent`: nothing.' },
  ),
  LOG_FORMAT: Type.Union([Type.Literal('auto'), Type.Literal('json'), Type.Literal('pretty')], {
    default: 'auto',
    description:
      '`auto`: pretty-printed (pino-pretty) when standard output is a terminal, JSON lines otherwise; `json` or `pretty` to choose.',
  }),
  LOG_SYNC: Type.Boolean({
    default: false,
    description:
      '`true`: each JSON line is written before the server goes on, one system call per line. Otherwise lines are ' +
      'written in batches: once 4 KiB wait, within 100 ms, at close and on a fatal error. A process killed without ' +
      'warning (SIGKILL, out of memory) loses at most its last 100 ms of lines, and a runtime frozen between requests ' +
      '(serverless) holds them until it thaws: set `true` there. Pretty lines are always written at once.',
  }),
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
  RATE_LIMIT_BAN_THRESHOLD: Type.Integer({
    minimum: 1,
    default: 30,
    description: 'A caller refused more often than this within one minute window is banned.',
  }),
  RATE_LIMIT_BAN_SECONDS: Type.Integer({ minimum: 1, default: 900, description: 'How long a ban lasts.' }),
  RATE_LIMIT_IPV6_PREFIX: Type.Integer({
    minimum: 1,
    maximum: 128,
    default: 64,
    description: 'Callers without a valid key are counted per IPv6 network of this many leading bits (IPv4: per address).',
  }),
  RATE_LIMIT_COSTS: Type.String({
    default: '',
    pattern: '^([A-Za-z]+=[0-9]+(,[A-Za-z]+=[0-9]+)*)?$',
    examples: ['createPet=5,listPets=1'],
    description:
      "The units an operation spends of a key's quota in both windows, as `operationId=units` pairs (1 to 1000); every other " +
      'operation costs 1, so unset the limits count requests. A request with fewer units left than its cost is refused. ' +
      "A cost above a plan's per-minute or per-day limit stops the start (its keys could never call the operation).",
  }),
  RATE_LIMIT_SHADOW_PLANS: Type.String({
    default: '',
    pattern: '^([a-z]+(,[a-z]+)*)?$',
    examples: ['free,pro'],
    description:
      "Plans in shadow mode: past its limits a key of these plans is served, with the headers of a refusal, counted in `rate_limit_shadow_refusals_total` and logged once a minute; never refused or banned. The admin API's `enforceLimits: false` does the same for one key.",
  }),
  RATE_LIMIT_CONCURRENCY: Type.String({
    default: 'free=5,pro=20,business=50,enterprise=100',
    pattern: '^(off|[a-z]+=[0-9]+(,[a-z]+=[0-9]+)*)$',
    examples: ['free=2,pro=10', 'off'],
    description:
      "Requests a key may have in flight at once, per plan, as `plan=requests` pairs (1 to 100000); a plan not named has no such limit, `off` none. The admin API's `concurrency` sets one key's own. Over it: 429 `concurrency_limited`, costing no quota.",
  }),
  WEBHOOK_URL: Type.Optional(
    Type.String({
      pattern: '^https?://[^/\\s]+(/\\S*)?$',
      examples: ['https://billing.example.com/hooks/pet-store'],
      description:
        'Where usage events are POSTed (`usage.threshold`, `key.banned`), signed with `WEBHOOK_SECRET`; unset, none are recorded or sent (docs/admin-api.md, "Usage events"). ' +
        'A user and password in it (`https://user:password@host/path`, %-escaped) are sent as HTTP Basic authentication, never in the URL, and never shown.',
    }),
  ),
  WEBHOOK_SECRET: Type.Optional(
    Type.String({
      minLength: 32,
      description:
        "The secret the `Pet-Store-Signature` header's HMAC-SHA256 is keyed with: at least 32 characters, required with `WEBHOOK_URL`. Never logged.",
    }),
  ),
  WEBHOOK_USAGE_THRESHOLDS: Type.String({
    default: '80,100',
    pattern: '^[0-9]+(,[0-9]+)*$',
    examples: ['50,80,100'],
    description: "Percentages of a key's window (1 to 100, ascending): crossing each sends one `usage.threshold` event per window.",
  }),
  WEBHOOK_RETENTION_DAYS: Type.Integer({
    minimum: 1,
    default: 30,
    description:
      'Delivered and failed usage events are deleted this many days after they were recorded (pending ones are kept, however old); with `WEBHOOK_URL`.',
  }),
  KEY_CACHE_MAX_ENTRIES: Type.Integer({
    minimum: 1,
    default: 100_000,
    description:
      'API keys each instance keeps in memory at most (the recently used ones); the rest are looked up on first use. ' +
      'Memory follows this, not the number of keys.',
  }),
  IDEMPOTENCY_KEY_RETENTION_HOURS: Type.Integer({
    minimum: 24,
    default: 24,
    description:
      'How long an `Idempotency-Key` and the response it stored are kept: at least the 24 hours clients are promised. ' +
      'Published in the OpenAPI document.',
  }),
  TRUST_PROXY: Type.String({
    default: '',
    examples: ['10.0.0.5, 10.1.0.0/16'],
    description:
      'Comma-separated addresses or CIDRs of the proxies whose `X-Forwarded-For` and `X-Request-Id` are believed: ' +
      "the proxies' own addresses only. Empty: none.",
  }),
  METRICS_PORT: Type.Integer({
    minimum: 0,
    maximum: 65535,
    default: 9464,
    description: 'Port of the Prometheus `/metrics` endpoint, apart from the API (no auth, no rate limit); `0`: any free port.',
  }),
  METRICS_HOST: Type.String({
    minLength: 1,
    default: '127.0.0.1',
    description: 'Address of the metrics endpoint; `0.0.0.0` in the image.',
  }),
  ADMIN_PORT: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 65535,
      description:
        "Port of the admin API (key management, see [docs/admin-api.md](admin-api.md)), never the API's `PORT` and never " +
        'behind the public balancer; `0`: any free port. Unset: no admin listener.',
    }),
  ),
  ADMIN_HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'Address of the admin API; a private interface only.' }),
  HEADERS_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    default: 10_000,
    description: 'A client must send all its headers within this time, else 408.',
  }),
  REQUEST_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    default: 30_000,
    description: 'A client must send its whole request within this time.',
  }),
  IDLE_TIMEOUT_MS: Type.Integer({
    minimum: 100,
    default: 60_000,
    description: 'A socket that sends and reads nothing this long is closed.',
  }),
  MAX_CONNECTIONS: Type.Integer({
    minimum: 1,
    default: 10_000,
    description: 'Open client connections one instance accepts at most; past it, new ones are refused.',
  }),
  PETS_CACHE_MAX_BYTES: Type.Integer({
    minimum: 0,
    default: 32 * 1024 * 1024,
    description: 'Bytes of pets and listing pages each instance caches at most; `0` turns the cache off.',
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.Optional(
    Type.String({
      pattern: '^https?://',
      examples: ['http://collector:4318'],
      description:
        "Tracing: the OTLP/HTTP collector's base URL; spans go to its `/v1/traces` (the OTLP exporter specification's rule). " +
        'Unset, and no `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: no tracing, and nothing of OpenTelemetry loaded.',
    }),
  ),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.Optional(
    Type.String({
      pattern: '^https?://',
      examples: ['http://collector:4318/v1/traces'],
      description: 'The full traces URL instead, used as given.',
    }),
  ),
  OTEL_TRACES_SAMPLER: Type.Union(
    [
      Type.Literal('parentbased_always_on'),
      Type.Literal('parentbased_always_off'),
      Type.Literal('parentbased_traceidratio'),
      Type.Literal('always_on'),
      Type.Literal('always_off'),
      Type.Literal('traceidratio'),
    ],
    {
      default: 'parentbased_always_on',
      description:
        "Tracing: which requests are traced, by the OpenTelemetry SDK's names: `*traceidratio` trace the share `OTEL_TRACES_SAMPLER_ARG`, " +
        "`*always_on` all, `*always_off` none. A caller's `traceparent` continues its trace but does not decide: `parentbased_*` follow its " +
        'sampled flag only from `TRACING_TRUSTED_PARENTS`.',
    },
  ),
  OTEL_TRACES_SAMPLER_ARG: Type.Number({
    minimum: 0,
    maximum: 1,
    default: 1,
    description: 'For the `*traceidratio` samplers: the share of requests traced, from 0 to 1.',
  }),
  TRACING_TRUSTED_PARENTS: Type.String({
    default: '',
    examples: ['10.0.0.7, 10.2.0.0/16'],
    description:
      "Tracing: comma-separated addresses or CIDRs of the callers (the connection's peer) whose `traceparent` decides whether a request is " +
      'traced, as `OTEL_TRACES_SAMPLER` says (`parentbased_*` follow its sampled flag; `traceidratio` decides by its trace id): a traced ' +
      "proxy or service of yours that sets its own. Empty: none; every other request is drawn at the sampler's ratio, its caller's trace id kept.",
  }),
  OTEL_SERVICE_NAME: Type.String({ minLength: 1, default: 'pet-store', description: 'The `service.name` of every span.' }),
  DB_POOL_SIZE: Type.Integer({ minimum: 1, default: 10, description: 'Connections each instance opens to PostgreSQL at most.' }),
  SHUTDOWN_DRAIN_MS: Type.Integer({
    minimum: 0,
    maximum: 120_000,
    default: 5_000,
    description:
      'On SIGTERM, how long `/readyz` answers 503 while every other request is still served, before the server closes: at ' +
      'least the time a balancer takes to stop sending here (see [docs/deploying.md](deploying.md#rolling-deploys)).',
  }),
  LOAD_SHED_EVENT_LOOP_DELAY_MS: Type.Integer({
    minimum: 0,
    default: 1000,
    description: "Shed load (503) when the event loop lags longer than this; `0`: never for the loop's lag.",
  }),
  LOAD_SHED_POOL_WAITING: Type.Integer({
    minimum: 1,
    default: 100,
    description: 'Shed load (503) when more requests than this wait for a database connection.',
  }),
});

type Settings = Static<typeof ConfigSchema>;

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

/** The most one operation may cost: RATE_LIMIT_COSTS's bound, far above what any plan would price a request at. */
const MAX_OPERATION_COST = 1000;
/** RATE_LIMIT_CONCURRENCY's bound, as the api_keys column's (migrations/012). */
const MAX_CONCURRENCY = 100_000;

/** The settings parsed here into the values of Config below, so that no other code parses them again. */
const PARSED_SETTINGS = [
  'PUBLIC_BASE_URL',
  'DATABASE_REPLICA_URLS',
  'TRUST_PROXY',
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
] as const;

/** The settings, checked, with those that need parsing parsed. */
export type Config = Omit<Settings, (typeof PARSED_SETTINGS)[number]> & {
  /** PUBLIC_BASE_URL, or the one HOST and PORT give. */
  PUBLIC_BASE_URL: string;
  /** DATABASE_REPLICA_URLS, one URL each; empty: every read on the primary. */
  databaseReplicaUrls: string[];
  /** TRUST_PROXY's addresses and CIDRs: Fastify's trustProxy, and the proxies whose X-Request-Id is kept. */
  trustedProxies: string[];
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
  rateLimitConcurrency: Record<string, number>;
  /** Where and how usage events are sent; undefined without WEBHOOK_URL. */
  webhooks: WebhookSettings | undefined;
};

export interface WebhookSettings {
  /** WEBHOOK_URL without its user and password. */
  url: string;
  /** The Authorization header's value when WEBHOOK_URL holds a user or password: Basic with both. */
  authorization: string | undefined;
  secret: string;
  /** WEBHOOK_USAGE_THRESHOLDS: percentages, ascending. */
  usageThresholds: number[];
}

/** A setting's value in an error: quoted, with any password in it masked (the line goes to logs). */
const invalid = (name: string, value: string, why: string) =>
  new ConfigError(`Invalid ${name}=${/_(SECRET|PASSWORD)$/.test(name) ? '***' : JSON.stringify(redactPasswords(value))}: ${why}`);

/** `scheme:` and what follows it up to its URL's last `@` (an unescaped password may hold one), not into the next URL of a list. */
const UP_TO_USERINFO_END = /([a-z][a-z0-9+.-]*:)((?:(?!:\/\/).)*)@/gi;

/**
 * The text with the password of every `scheme://user:password@` masked, and every `password=` query parameter's. A URL
 * of another shape (`redis:/user:password@host`, one slash: no URL, and no telling where its password is) has all
 * between its `scheme:` and its last `@` masked; `scheme://user@` has no password to mask.
 */
export function redactPasswords(text: string): string {
  return text
    .replace(UP_TO_USERINFO_END, (whole, scheme: string, userinfo: string) => {
      if (/^\/\/[^:@/\s]*$/.test(userinfo)) return whole;
      const user = /^\/\/[^:@/\s]*(?=:)/.exec(userinfo)?.[0] ?? '';
      return `${scheme}${user && `${user}:`}***@`;
    })
    .replace(/([?&]password=)[^&#\s]*/gi, '$1***');
}

/** TypeBox converts with parseInt, which reads `1e6` as 1 and `3.2e7` as 3: these take plain digits only. */
const INTEGER_SETTINGS = Object.entries(ConfigSchema.properties)
  .filter(([, schema]) => schema.type === 'integer')
  .map(([name]) => name);

/** Validates the environment; throws a ConfigError naming the first bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const known = Object.fromEntries(
    Object.keys(ConfigSchema.properties)
      .filter((key) => env[key] !== undefined && env[key] !== '')
      .map((key) => [key, env[key]]),
  );
  const notInteger = INTEGER_SETTINGS.find((name) => name in known && !/^-?[0-9]+$/.test(known[name]!));
  if (notInteger) throw invalid(notInteger, known[notInteger]!, 'must be a whole number in plain digits');
  const values = Value.Default(ConfigSchema, Value.Convert(ConfigSchema, known));
  const error = Value.Errors(ConfigSchema, values).First();
  if (error) {
    const name = error.path.slice(1);
    throw invalid(name, env[name] ?? '', allowedValues(error.schema) ?? error.message);
  }
  const settings = values as Settings;
  const trustedProxies = addressesOf('TRUST_PROXY', settings.TRUST_PROXY);
  const tracingTrustedParents = addressesOf('TRACING_TRUSTED_PARENTS', settings.TRACING_TRUSTED_PARENTS);
  if (settings.ADMIN_PORT !== undefined && settings.ADMIN_PORT !== 0 && settings.ADMIN_PORT === settings.PORT) {
    throw invalid('ADMIN_PORT', String(settings.ADMIN_PORT), "it is the API's PORT; the admin API is never served on the public port");
  }
  if (settings.DATABASE_REPLICA_URLS !== undefined && settings.DATABASE_URL === undefined) {
    throw new ConfigError(
      'DATABASE_REPLICA_URLS needs DATABASE_URL: replicas are PostgreSQL streaming replicas of the primary DATABASE_URL names, ' +
        'and the embedded database (DATABASE_URL unset) has none',
    );
  }
  const databaseReplicaUrls = (settings.DATABASE_REPLICA_URLS ?? '')
    .split(',')
    .map((url) => url.trim())
    .filter(Boolean);
  // ioredis reads REDIS_URL, and the replicas' names come from their URLs, as WHATWG URLs: one that is
  // none would end the start in a stack trace quoting it whole, password and all.
  const notUrl = databaseReplicaUrls.find((url) => !URL.canParse(url));
  if (notUrl !== undefined) {
    throw invalid('DATABASE_REPLICA_URLS', settings.DATABASE_REPLICA_URLS!, `${JSON.stringify(redactPasswords(notUrl))} is not a URL`);
  }
  if (settings.REDIS_URL !== undefined && !URL.canParse(settings.REDIS_URL)) throw invalid('REDIS_URL', settings.REDIS_URL, 'not a URL');
  const redisModes = (['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'] as const).filter((name) => settings[name] !== undefined);
  if (redisModes.length > 1) throw new ConfigError(`Set one of ${redisModes.join(' and ')}, not both: they name different kinds of Redis`);
  if ((settings.REDIS_SENTINELS === undefined) !== (settings.REDIS_SENTINEL_MASTER === undefined)) {
    throw new ConfigError('REDIS_SENTINELS and REDIS_SENTINEL_MASTER go together: the Sentinels and the name of the master they watch');
  }
  const concurrency = settings.RATE_LIMIT_CONCURRENCY;
  if ((settings.WEBHOOK_URL === undefined) !== (settings.WEBHOOK_SECRET === undefined)) {
    throw new ConfigError(
      'WEBHOOK_URL and WEBHOOK_SECRET go together: the receiver checks every event against the secret (at least 32 characters)',
    );
  }
  // The pattern takes `https://exa[mple.com`, which fetch would refuse at every attempt.
  if (settings.WEBHOOK_URL !== undefined && !URL.canParse(settings.WEBHOOK_URL))
    throw invalid('WEBHOOK_URL', settings.WEBHOOK_URL, 'not a URL');
  const usageThresholds = settings.WEBHOOK_USAGE_THRESHOLDS.split(',').map(Number);
  if (usageThresholds.some((threshold, i) => threshold < 1 || threshold > 100 || threshold <= (usageThresholds[i - 1] ?? 0))) {
    throw invalid('WEBHOOK_USAGE_THRESHOLDS', settings.WEBHOOK_USAGE_THRESHOLDS, 'percentages from 1 to 100, ascending, each once');
  }
  const unparsed = Object.fromEntries(
    Object.entries(settings).filter(([name]) => !(PARSED_SETTINGS as readonly string[]).includes(name)),
  ) as Omit<Settings, (typeof PARSED_SETTINGS)[number]>;
  return {
    ...unparsed,
    PUBLIC_BASE_URL: settings.PUBLIC_BASE_URL ?? defaultBaseUrl(settings.HOST, settings.PORT),
    databaseReplicaUrls,
    trustedProxies,
    tracingTrustedParents,
    redisTarget: redisTarget(settings),
    redisCredentials: {
      username: settings.REDIS_USERNAME,
      password: settings.REDIS_PASSWORD,
      sentinelPassword: settings.REDIS_SENTINEL_PASSWORD,
      tls: settings.REDIS_TLS,
    },
    rateLimitCosts: namedNumbers('RATE_LIMIT_COSTS', settings.RATE_LIMIT_COSTS, { max: MAX_OPERATION_COST, what: 'a cost' }),
    rateLimitShadowPlans: settings.RATE_LIMIT_SHADOW_PLANS.split(',').filter(Boolean),
    rateLimitConcurrency:
      concurrency === 'off' ? {} : namedNumbers('RATE_LIMIT_CONCURRENCY', concurrency, { max: MAX_CONCURRENCY, what: 'a limit' }),
    webhooks: settings.WEBHOOK_URL
      ? {
          ...webhookTarget(settings.WEBHOOK_URL),
          secret: settings.WEBHOOK_SECRET!,
          usageThresholds,
        }
      : undefined,
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
    throw invalid('WEBHOOK_URL', written, 'its user or password holds a % that starts no %-escape');
  }
  url.username = '';
  url.password = '';
  return { url: url.href, authorization: `Basic ${Buffer.from(credentials).toString('base64')}` };
}

/** Comma-separated addresses and CIDRs, each checked. */
function addressesOf(setting: string, value: string): string[] {
  const entries = value
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean);
  const bad = entries.find((entry) => !isAddressOrCidr(entry));
  if (bad !== undefined) throw invalid(setting, value, `${JSON.stringify(bad)} is not an IP address or CIDR`);
  return entries;
}

/** `name=number,...` pairs (their syntax checked by the schema's pattern), each name once, each number from 1 to `max`. */
function namedNumbers(setting: string, value: string, { max, what }: { max: number; what: string }): Record<string, number> {
  const numbers: Record<string, number> = {};
  for (const pair of value.split(',').filter(Boolean)) {
    const [name, digits] = pair.split('=') as [string, string];
    if (name in numbers) throw invalid(setting, value, `${name} is named twice`);
    const number = Number(digits);
    if (number < 1 || number > max) throw invalid(setting, value, `${name} is ${digits}; ${what} is from 1 to ${max}`);
    numbers[name] = number;
  }
  return numbers;
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

function redisTarget(settings: Settings): RedisTarget | undefined {
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

function defaultBaseUrl(host: string, port: number): string {
  const reachable = host === '0.0.0.0' || host === '::' ? 'localhost' : host.includes(':') ? `[${host}]` : host;
  return `http://${reachable}:${port}/v1`;
}
