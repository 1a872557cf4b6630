import { Type } from '@sinclair/typebox';

// The database: PostgreSQL and its replicas, or the embedded PGlite.
// Each description is the setting's documentation (see schema.ts).

/** Which database, its replicas and its LISTEN connection, or the embedded database's directory. */
export const database = {
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
};

/** Connections to PostgreSQL. */
export const databasePool = {
  DB_POOL_SIZE: Type.Integer({ minimum: 1, default: 10, description: 'Connections each instance opens to PostgreSQL at most.' }),
};
