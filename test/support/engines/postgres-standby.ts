import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { startPostgresServer, TEST_SERVER_SETTINGS, type PostgresServer } from '../postgres-server.js';
import { engineDir, postgresUser, runCommand, spawnDaemon, waitFor, withFreshPorts, type Daemon } from './daemon.js';

/**
 * A primary and a streaming-replication standby, both private (issue #20). The primary is
 * startPostgresServer()'s server: initdb's defaults already replicate (wal_level replica,
 * max_wal_senders 10, and its pg_hba trusts replication from 127.0.0.1). The standby is made from it
 * with `pg_basebackup -R` (through a replication slot, so the primary keeps the WAL it needs) and
 * runs, as the postgres user, the same binaries the primary runs, on another free port.
 */

export interface PostgresNode {
  port: number;
  /** The postmaster's PID now. */
  readonly pid: number;
  url(database?: string): string;
}

export interface PrimaryWithStandby {
  /** server: the primary's PostgresServer (freeze, thaw, start, createDatabase...). */
  primary: PostgresNode & { server: PostgresServer };
  standby: PostgresNode;
  /** Resolves once the standby has replayed everything the primary has written so far; to the ms it took. */
  waitForReplay(timeoutMs?: number): Promise<number>;
  /** Promotes the standby (pg_promote) and resolves once it takes writes; to the ms it took. */
  promote(timeoutMs?: number): Promise<number>;
  /** A clean, fast shutdown of the primary (SIGINT). */
  stopPrimary(): Promise<void>;
  /** SIGKILL of the primary's whole process tree: a crash. */
  killPrimary(): Promise<void>;
  /** SIGKILL of the standby's whole process tree. */
  killStandby(): Promise<void>;
  /** A clean, fast shutdown of the standby (SIGINT). */
  stopStandby(): Promise<void>;
  /** SIGSTOP to every process of the standby: its connections stay open and nothing answers, new ones are accepted and never greeted. */
  freezeStandby(): void;
  /** SIGCONT to every process freezeStandby() stopped. */
  thawStandby(): void;
  /** Starts the stopped standby again on its port; resolves once it takes connections. */
  startStandby(): Promise<void>;
  /** The standby applies each commit this long after the primary made it (recovery_min_apply_delay; 0: at once). */
  delayStandby(ms: number): Promise<void>;
  /** The standby applies nothing more, though it still receives the WAL, until resumeReplay() (pg_wal_replay_pause). */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Stops both and removes their directories. */
  close(): Promise<void>;
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/** A postmaster and its children (backends, walreceiver, startup...): PostgreSQL's backends do not outlive it on SIGKILL of all. */
function processTree(pid: number): number[] {
  let children: number[] = [];
  try {
    children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
      .split('\n')
      .map((line) => Number(line.trim()))
      .filter((child) => child > 0);
  } catch {
    // ps exits 1 when there are none
  }
  return [pid, ...children];
}

function killTree(pid: number) {
  for (const each of processTree(pid)) {
    try {
      process.kill(each, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

export async function startPrimaryWithStandby(): Promise<PrimaryWithStandby> {
  const server = await startPostgresServer();
  const user = postgresUser();
  let dir: Awaited<ReturnType<typeof engineDir>> | undefined;
  let standby: Daemon | undefined;
  let standbyPort = 0;
  let startStandbyDaemon: (() => Promise<Daemon>) | undefined;
  try {
    const [settings] = await query<{ data_directory: string; bindir: string; wal_level: string; senders: string }>(
      server.url(),
      `SELECT current_setting('data_directory') AS data_directory, current_setting('wal_level') AS wal_level,
              current_setting('max_wal_senders') AS senders, (SELECT setting FROM pg_config WHERE name = 'BINDIR') AS bindir`,
    );
    if (!settings || settings.wal_level === 'minimal' || Number(settings.senders) < 1) {
      throw new Error(`the primary cannot stream (wal_level ${settings?.wal_level}, max_wal_senders ${settings?.senders})`);
    }
    const primaryDataDir = settings.data_directory;
    const binDir = settings.bindir;
    const standbyDir = await engineDir('pg-standby', user);
    dir = standbyDir;
    const dataDir = join(standbyDir.path, 'data');
    const slot = `standby_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
    await runCommand(
      join(binDir, 'pg_basebackup'),
      [
        '-h',
        '127.0.0.1',
        '-p',
        String(server.port),
        '-U',
        'postgres',
        '-D',
        dataDir,
        '-R',
        '-X',
        'stream',
        '-C',
        '-S',
        slot,
        '-c',
        'fast',
        '--no-sync',
      ],
      { cwd: standbyDir.path, user },
    );
    const binDirOf = binDir;
    const spawnStandby = async () => {
      // A primary killed just before promote() left the startup process waiting out this interval
      // (5 s by default) before it noticed the promotion: seen in this suite, 5 s instead of 0.2.
      const settings = [...TEST_SERVER_SETTINGS, 'wal_retrieve_retry_interval=200ms'];
      const args = ['-D', dataDir, '-p', String(standbyPort), '-k', standbyDir.path, ...settings.flatMap((setting) => ['-c', setting])];
      const started = spawnDaemon(`standby ${standbyPort}`, join(binDirOf, 'postgres'), args, { cwd: standbyDir.path, user });
      standby = started;
      try {
        // A hot standby takes read-only connections once it has replayed to a consistent point.
        await waitFor(`standby ${standbyPort} accepts connections`, async () => (await query(standbyUrl(), 'SELECT 1')).length === 1, {
          daemons: [started],
          timeoutMs: 30_000,
        });
      } catch (error) {
        killTree(started.pid);
        await started.exited;
        throw error;
      }
      return started;
    };
    startStandbyDaemon = spawnStandby;
    await withFreshPorts(1, async (ports) => {
      [standbyPort] = ports as [number];
      await spawnStandby();
    });

    const primaryPid = () => Number(readFileSync(join(primaryDataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    let running = standby!;
    let frozen: number[] = [];
    const thaw = () => {
      for (const pid of frozen.splice(0)) {
        try {
          process.kill(pid, 'SIGCONT');
        } catch {
          // already gone
        }
      }
    };

    // The insert position: with synchronous_commit off, a commit may not be written yet, and the
    // standby gets it once the WAL writer has flushed it.
    const waitForReplay = (timeoutMs = 10_000) =>
      waitFor(
        'the standby replays all the primary wrote',
        async () => {
          const [{ lsn = '' } = {}] = await query<{ lsn: string }>(server.url(), 'SELECT pg_current_wal_insert_lsn()::text AS lsn');
          const [{ caught = false } = {}] = await query<{ caught: boolean }>(
            standbyUrl(),
            `SELECT pg_last_wal_replay_lsn() >= '${lsn}'::pg_lsn AS caught`,
          );
          return caught;
        },
        { timeoutMs, daemons: [running] },
      );

    return {
      primary: {
        port: server.port,
        get pid() {
          return primaryPid();
        },
        url: (database?: string) => server.url(database),
        server,
      },
      standby: {
        port: standbyPort,
        get pid() {
          return running.pid;
        },
        url: standbyUrl,
      },
      waitForReplay,
      async promote(timeoutMs = 30_000) {
        const started = Date.now();
        const [{ promoted = false } = {}] = await query<{ promoted: boolean }>(
          standbyUrl(),
          `SELECT pg_promote(true, ${Math.ceil(timeoutMs / 1_000)}) AS promoted`,
        );
        if (!promoted) throw new Error(`the standby was not promoted within ${timeoutMs} ms:\n${running.output()}`);
        // Out of recovery, and an xid can be assigned: it takes writes.
        await waitFor(
          'the promoted standby takes writes',
          async () => (await query(standbyUrl(), 'SELECT txid_current() WHERE NOT pg_is_in_recovery()')).length === 1,
          { timeoutMs, daemons: [running] },
        );
        return Date.now() - started;
      },
      stopPrimary: () => server.stop('fast'),
      killPrimary: () => server.stop('kill'),
      async killStandby() {
        if (!running.running()) return;
        killTree(running.pid);
        await running.exited;
      },
      async stopStandby() {
        if (!running.running()) return;
        process.kill(running.pid, 'SIGINT');
        const timer = setTimeout(() => killTree(running.pid), 10_000);
        await running.exited;
        clearTimeout(timer);
      },
      freezeStandby() {
        // The postmaster first, so that no new backend appears; each backend is a session of its own, so each gets its signal.
        process.kill(running.pid, 'SIGSTOP');
        frozen = processTree(running.pid);
        for (const pid of frozen) if (pid !== running.pid) process.kill(pid, 'SIGSTOP');
      },
      thawStandby: thaw,
      async startStandby() {
        if (running.running()) return;
        running = await startStandbyDaemon!();
      },
      async delayStandby(ms: number) {
        await query(standbyUrl(), `ALTER SYSTEM SET recovery_min_apply_delay = '${Math.round(ms)}ms'`);
        await query(standbyUrl(), 'SELECT pg_reload_conf()');
      },
      async pauseReplay() {
        // Requested, no record is applied any more, even before the state reads 'paused' (the next record it meets).
        await query(standbyUrl(), 'SELECT pg_wal_replay_pause()');
      },
      async resumeReplay() {
        await query(standbyUrl(), 'SELECT pg_wal_replay_resume()');
      },
      async close() {
        thaw();
        if (running.running()) {
          // A fast shutdown; the whole tree killed if it takes too long.
          process.kill(running.pid, 'SIGINT');
          const timer = setTimeout(() => killTree(running.pid), 10_000);
          await running.exited;
          clearTimeout(timer);
        }
        await server.destroy();
        await standbyDir.remove();
      },
    };
  } catch (error) {
    if (standby?.running()) {
      killTree(standby.pid);
      await standby.exited;
    }
    await server.destroy();
    await dir?.remove();
    throw error;
  }

  function standbyUrl(database = 'postgres') {
    return `postgres://postgres@127.0.0.1:${standbyPort}/${database}`;
  }
}
