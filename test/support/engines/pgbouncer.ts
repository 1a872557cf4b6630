import { chown, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { engineDir, postgresUser, requireProgram, spawnDaemon, waitFor, withFreshPorts, type Daemon } from './daemon.js';

/**
 * A real PgBouncer (Debian's package) in front of a PostgreSQL, on a free loopback port, its ini in
 * a temporary directory. Its version is whatever Debian ships (1.18 on bookworm): before 1.21 there
 * is no max_prepared_statements, and on 1.21+ it is left at its default 0, so in transaction mode a
 * named prepared statement lives on whichever server connection the client had then (issue #20
 * wants that exposed). Trust authentication, user postgres (the auth_file lists it); postgres is an
 * admin user, so a test can PAUSE, RESUME, RECONNECT or RELOAD on the admin console.
 */

const HOST = '127.0.0.1';
const USER = 'postgres';

export interface PgBouncerOptions {
  upstream: { host: string; port: number };
  mode?: 'transaction' | 'session' | 'statement';
  /** default_pool_size: server connections per database and user. */
  poolSize?: number;
  /** More [pgbouncer] settings, written as they are (server_login_retry is 1 s by default here). */
  settings?: Record<string, string | number>;
}

export interface PgBouncer {
  port: number;
  /** The running process's PID. */
  pid: number;
  /** A URL of a database through the pooler (postgres by default; any database of the upstream works). */
  url(database?: string): string;
  /** Runs a command on the admin console (SHOW POOLS, PAUSE, RESUME, RECONNECT, RELOAD...); its rows. */
  admin(command: string): Promise<Record<string, unknown>[]>;
  /**
   * Points every database at another upstream: rewrites the ini and RELOADs; resolves once SHOW
   * DATABASES shows the new address for all. Server connections to the old one close once released.
   */
  pointAt(upstream: { host: string; port: number }): Promise<void>;
  /** The ini as written now. */
  config(): string;
  /** What pgbouncer logged, for failure messages. */
  output(): string;
  /** SIGKILL: a crash. */
  kill(): Promise<void>;
  /** Stops it (SIGTERM, SIGKILL after 2 s) and removes its directory. */
  close(): Promise<void>;
}

export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const { mode = 'transaction', poolSize = 2, settings = {} } = options;
  const binary = requireProgram('pgbouncer');
  const user = postgresUser(); // pgbouncer refuses to run as root
  const dir = await engineDir('pgbouncer', user);
  const iniFile = join(dir.path, 'pgbouncer.ini');
  const authFile = join(dir.path, 'userlist.txt');
  let upstream = options.upstream;
  /** Databases named in the ini besides the * fallback: those pgbouncer created from * keep their old address on RELOAD otherwise. */
  let named: string[] = [];
  let ini = '';
  let daemon: Daemon | undefined;
  let port = 0;

  const url = (database = 'postgres') => `postgres://${USER}@${HOST}:${port}/${database}`;

  const write = async (path: string, text: string) => {
    await writeFile(path, text, { mode: 0o600 });
    if (user) await chown(path, user.uid, user.gid);
  };

  const render = () => {
    const target = `host=${upstream.host} port=${upstream.port}`;
    const pgbouncer: Record<string, string | number> = {
      listen_addr: HOST,
      listen_port: port,
      // No Unix socket: nothing in /tmp to collide with another pgbouncer.
      unix_socket_dir: '',
      auth_type: 'trust',
      auth_file: authFile,
      admin_users: USER,
      pool_mode: mode,
      default_pool_size: poolSize,
      max_client_conn: 200,
      // The default 15 s between attempts at an upstream that refused makes a switchover test slow.
      server_login_retry: 1,
      ignore_startup_parameters: 'extra_float_digits',
      logfile: '',
      pidfile: '',
      ...settings,
    };
    return [
      '[databases]',
      ...named.map((name) => `${name} = ${target} dbname=${name}`),
      `* = ${target}`,
      '',
      '[pgbouncer]',
      ...Object.entries(pgbouncer).map(([key, value]) => `${key} = ${value}`),
      '',
    ].join('\n');
  };

  async function admin(command: string): Promise<Record<string, unknown>[]> {
    const client = new pg.Client({ connectionString: url('pgbouncer'), connectionTimeoutMillis: 2_000 });
    client.on('error', () => {});
    await client.connect();
    try {
      // The admin console speaks the simple query protocol only: no parameters.
      const result = await client.query<Record<string, unknown>>(command);
      return result.rows;
    } finally {
      await client.end().catch(() => {});
    }
  }

  try {
    await write(authFile, `"${USER}" ""\n`);
    await withFreshPorts(1, async (ports) => {
      [port] = ports as [number];
      ini = render();
      await write(iniFile, ini);
      const started = spawnDaemon(`pgbouncer ${port}`, binary, [iniFile], { cwd: dir.path, user });
      daemon = started;
      try {
        await waitFor(`pgbouncer ${port} answers on its admin console`, async () => (await admin('SHOW VERSION')).length > 0, {
          daemons: [started],
        });
      } catch (error) {
        await started.stop('SIGKILL');
        throw error;
      }
    });
  } catch (error) {
    await dir.remove();
    throw error;
  }
  const running = daemon!;

  return {
    port,
    pid: running.pid,
    url,
    admin,
    async pointAt(next) {
      upstream = next;
      const known = (await admin('SHOW DATABASES')).map((row) => String(row.name));
      named = [...new Set([...named, ...known])].filter((name) => name !== 'pgbouncer' && name !== '*');
      ini = render();
      await write(iniFile, ini);
      await admin('RELOAD');
      await waitFor(`pgbouncer points at ${next.host}:${next.port}`, async () =>
        (await admin('SHOW DATABASES'))
          .filter((row) => row.name !== 'pgbouncer')
          .every((row) => row.host === next.host && Number(row.port) === next.port),
      );
    },
    config: () => ini,
    output: () => running.output(),
    kill: () => running.stop('SIGKILL'),
    async close() {
      await running.stop('SIGTERM', 2_000);
      await dir.remove();
    },
  };
}
