import { Type } from '@sinclair/typebox';

// The API's and the admin API's listeners, the public base URL, proxies, connections, shutdown and load shedding.
// Each description is the setting's documentation (see schema.ts).

/** Where the API listens. */
export const listener = {
  PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 3000, description: 'Port the API listens on; `0`: any free port.' }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'Address the API listens on; `0.0.0.0` in containers.' }),
};

/** The base every link the API writes starts with. */
export const publicBaseUrl = {
  PUBLIC_BASE_URL: Type.Optional(
    Type.String({
      pattern: '^https?://[^/]+(/.*)?/v1$',
      examples: ['https://api.example.com/v1'],
      description:
        'The absolute base clients see, ending in `/v1`: every `Location` and `Link` and the OpenAPI `servers` use it. ' +
        'Unset: `http://{HOST}:{PORT}/v1` (`localhost` for `0.0.0.0` and `::`).',
    }),
  ),
};

/** Whose forwarding headers are believed. */
export const proxies = {
  TRUST_PROXY: Type.String({
    default: '',
    examples: ['10.0.0.5, 10.1.0.0/16'],
    description:
      'Comma-separated addresses or CIDRs of the proxies whose `X-Forwarded-For` and `X-Request-Id` are believed: ' +
      "the proxies' own addresses only. Empty: none.",
  }),
};

/** Which web pages may call the API from a browser (docs/api.md, "Calling from a browser"). */
export const cors = {
  CORS_ORIGINS: Type.String({
    default: '*',
    examples: ['https://shop.example.com, http://localhost:5173'],
    description:
      'The web origins whose pages may call the API (CORS, never on the admin listener): `*` any origin (the API takes a bearer key ' +
      'a page holds itself, never a cookie); a comma-separated list of exact origins, `scheme://host[:port]`; `off`: no CORS headers at all.',
  }),
};

/** Where the admin API listens, if anywhere. */
export const adminListener = {
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
};

/** How long a client may take, and how many may connect. */
export const connections = {
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
};

/** Draining on SIGTERM, and shedding load under pressure. */
export const shutdownAndLoadShedding = {
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
};
