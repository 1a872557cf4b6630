import { Type } from '@sinclair/typebox';

// Logs, metrics and tracing.
// Each description is the setting's documentation (see schema.ts).

/** What is logged and how it is written. */
export const logs = {
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
};

/** The Prometheus endpoint. */
export const metrics = {
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
};

/** OpenTelemetry tracing, off unless a collector is named. */
export const tracing = {
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
};
