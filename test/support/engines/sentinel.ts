import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { engineDir, findProgram, requireProgram, spawnDaemon, waitFor, withFreshPorts, type Daemon } from './daemon.js';
import { HOST, baseRedisArgs, redisCommand, startRedisServer } from './redis-process.js';

/**
 * Redis Sentinel for real (issue #20): a master redis-server, its replicas (replicaof) and three
 * sentinels (redis-sentinel, or redis-server --sentinel when the package is missing), each on a
 * free loopback port, their config files in a temporary directory (sentinels rewrite them).
 */

export interface SentinelOptions {
  /** Replicas of the master: 1 or 2. */
  replicas?: number;
  /** Sentinels that must agree the master is down; 2 of the 3 by default. */
  quorum?: number;
  /** down-after-milliseconds: how long the master may not answer before a sentinel thinks it down. */
  downAfterMs?: number;
  /** failover-timeout: also the wait before a failed failover is tried again (twice this). */
  failoverTimeoutMs?: number;
  /** requirepass and masterauth on the master and replicas (sentinel auth-pass); the sentinels need none. */
  password?: string;
  masterName?: string;
}

export interface Address {
  host: string;
  port: number;
}

export interface SwitchEvent {
  from: Address;
  to: Address & { pid: number };
  /** Date.now() when a sentinel published +switch-master. */
  at: number;
  /** ms from the last killMaster() to the switch (undefined without one). */
  afterKillMs?: number;
}

export interface SentinelSetup {
  masterName: string;
  /** For clients: 'host:port,...' of the three sentinels. */
  sentinels: string;
  sentinelAddresses: Address[];
  password?: string;
  /** Every redis-server (master and replicas, whatever their role now): port and PID. */
  servers(): { port: number; pid: number; running: boolean }[];
  /** The master now, as a sentinel reports it (SENTINEL get-master-addr-by-name). */
  master(): Promise<Address & { pid: number }>;
  /** SIGKILL of the master now; resolves once the process is gone. */
  killMaster(): Promise<{ port: number; pid: number; at: number }>;
  /** Starts the server on this port again as it was started first (a former master comes back as a master, until a sentinel converts it). */
  restart(port: number): Promise<void>;
  /**
   * Resolves once the server on this port is back in the replication set, to the ms it took: a
   * replica of the current master with its link up, or, where the Sentinels failed over to it
   * again (seen on a loaded machine), the master with a replica linked.
   */
  waitUntilRejoined(port: number, timeoutMs?: number): Promise<number>;
  /** The first +switch-master after the last killMaster() (or after this call, without one). */
  waitForSwitch(timeoutMs?: number): Promise<SwitchEvent>;
  /** What the sentinel subscribed to published: every event, for failure messages. */
  events(): { channel: string; message: string; at: number }[];
  close(): Promise<void>;
}

export async function startSentinel(options: SentinelOptions = {}): Promise<SentinelSetup> {
  const { replicas = 1, quorum = 2, downAfterMs = 1_000, failoverTimeoutMs = 3_000, password, masterName = 'pets' } = options;
  if (replicas < 1) throw new Error('a failover needs a replica');
  const sentinelBinary = findProgram('redis-sentinel');
  const dir = await engineDir('redis-sentinel');
  const servers = new Map<number, { daemon: Daemon; args: string[] }>();
  const sentinelDaemons = new Map<number, Daemon>();
  const events: { channel: string; message: string; at: number }[] = [];
  let subscriber: Redis | undefined;
  let lastKillAt: number | undefined;

  const killAll = async () => {
    subscriber?.disconnect();
    const all = [...servers.values()].map(({ daemon }) => daemon).concat([...sentinelDaemons.values()]);
    await Promise.all(all.map((daemon) => daemon.stop('SIGKILL')));
  };

  const startServer = (replicaOf?: number) =>
    withFreshPorts(1, async (ports) => {
      const [port] = ports as [number];
      const args = [...baseRedisArgs(port, dir.path, password), ...(replicaOf ? ['--replicaof', HOST, String(replicaOf)] : [])];
      const daemon = await startRedisServer(`redis ${replicaOf ? 'replica' : 'master'} ${port}`, args, {
        port: port,
        dir: dir.path,
        password,
      });
      servers.set(port, { daemon, args });
      return port;
    });

  const askSentinel = async (args: (string | number)[]) => {
    let lastError: unknown;
    for (const port of sentinelDaemons.keys()) {
      try {
        return await redisCommand(port, args);
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  };

  async function master() {
    const [host, port] = (await askSentinel(['SENTINEL', 'get-master-addr-by-name', masterName])) as [string, string];
    return { host, port: Number(port), pid: servers.get(Number(port))?.daemon.pid ?? -1 };
  }

  const replicationOf = async (port: number) => String(await redisCommand(port, ['INFO', 'replication'], password));

  async function waitUntilRejoined(port: number, timeoutMs = 30_000) {
    return waitFor(
      `redis on ${port} rejoins the current master's replication`,
      async () => {
        const current = await master();
        const info = await replicationOf(port);
        if (current.port === port) return info.includes('role:master') && !info.includes('connected_slaves:0');
        return info.includes('role:slave') && info.includes(`master_port:${current.port}`) && info.includes('master_link_status:up');
      },
      // The Sentinels' own logs say why when it does not (a TILT, say).
      { timeoutMs, intervalMs: 100, daemons: [...sentinelDaemons.values()] },
    );
  }

  async function waitUntilReplicaOfPort(port: number, masterPort: number) {
    await waitFor(`redis on ${port} syncs from ${masterPort}`, async () => {
      const info = await replicationOf(port);
      return info.includes(`master_port:${masterPort}`) && info.includes('master_link_status:up');
    });
  }

  try {
    const masterPort = await startServer();
    const replicaPorts: number[] = [];
    for (let i = 0; i < replicas; i++) replicaPorts.push(await startServer(masterPort));
    for (const port of replicaPorts) await waitUntilReplicaOfPort(port, masterPort);

    const sentinelPorts = await Promise.all(
      [0, 1, 2].map(() =>
        withFreshPorts(1, async (ports) => {
          const [port] = ports as [number];
          const configFile = join(dir.path, `sentinel-${port}.conf`);
          const lines = [
            `port ${port}`,
            `bind ${HOST}`,
            `dir ${dir.path}`,
            'daemonize no',
            'logfile ""',
            `sentinel monitor ${masterName} ${HOST} ${masterPort} ${quorum}`,
            `sentinel down-after-milliseconds ${masterName} ${downAfterMs}`,
            `sentinel failover-timeout ${masterName} ${failoverTimeoutMs}`,
            `sentinel parallel-syncs ${masterName} 1`,
            ...(password ? [`sentinel auth-pass ${masterName} ${password}`] : []),
          ];
          await writeFile(configFile, `${lines.join('\n')}\n`);
          const [command, args] = sentinelBinary
            ? [sentinelBinary, [configFile]]
            : [requireProgram('redis-server'), [configFile, '--sentinel']];
          const daemon = spawnDaemon(`sentinel ${port}`, command, args, { cwd: dir.path });
          sentinelDaemons.set(port, daemon);
          await waitFor(`sentinel ${port} answers PING`, async () => (await redisCommand(port, ['PING'])) === 'PONG', {
            daemons: [daemon],
          });
          return port;
        }),
      ),
    );

    // Ready when each sentinel knows the other two (a failover needs a majority of them to vote)
    // and every replica, none of them down.
    await waitFor(
      'every sentinel knows the other sentinels and the replicas',
      async () => {
        for (const port of sentinelPorts) {
          const others = (await redisCommand(port, ['SENTINEL', 'sentinels', masterName])) as unknown[];
          const known = (await redisCommand(port, ['SENTINEL', 'replicas', masterName])) as string[][];
          const healthy = known.filter((fields) => fields[fields.indexOf('flags') + 1] === 'slave');
          if (others.length !== sentinelPorts.length - 1 || healthy.length !== replicas) return false;
        }
        return true;
      },
      { daemons: [...sentinelDaemons.values()], timeoutMs: 30_000, intervalMs: 100 },
    );

    const listener = new Redis({ host: HOST, port: sentinelPorts[0], lazyConnect: true, maxRetriesPerRequest: 0 });
    subscriber = listener;
    listener.on('error', () => {});
    listener.on('pmessage', (_pattern: string, channel: string, message: string) => events.push({ channel, message, at: Date.now() }));
    await listener.connect();
    await listener.psubscribe('*');
  } catch (error) {
    await killAll();
    await dir.remove();
    throw error;
  }

  const sentinelAddresses = [...sentinelDaemons.keys()].map((port) => ({ host: HOST, port }));

  return {
    masterName,
    sentinels: sentinelAddresses.map(({ host, port }) => `${host}:${port}`).join(','),
    sentinelAddresses,
    password,
    servers: () => [...servers.entries()].map(([port, { daemon }]) => ({ port, pid: daemon.pid, running: daemon.running() })),
    master,
    async killMaster() {
      const current = await master();
      const server = servers.get(current.port);
      if (!server?.daemon.running()) throw new Error(`the master on ${current.port} is not running`);
      lastKillAt = Date.now();
      await server.daemon.stop('SIGKILL');
      return { port: current.port, pid: server.daemon.pid, at: lastKillAt };
    },
    async restart(port) {
      const server = servers.get(port);
      if (!server) throw new Error(`no redis-server on ${port}`);
      if (server.daemon.running()) throw new Error(`the redis-server on ${port} is running`);
      const daemon = await startRedisServer(`redis ${port} (restarted)`, server.args, { port, dir: dir.path, password });
      servers.set(port, { daemon, args: server.args });
    },
    waitUntilRejoined,
    async waitForSwitch(timeoutMs = 30_000) {
      const since = lastKillAt ?? Date.now();
      let found: SwitchEvent | undefined;
      await waitFor(
        `+switch-master of ${masterName}`,
        async () => {
          const event = events.find((candidate) => candidate.channel === '+switch-master' && candidate.at >= since);
          if (!event) return false;
          // <name> <old ip> <old port> <new ip> <new port>
          const [, fromHost = '', fromPort, toHost = '', toPort] = event.message.split(' ');
          found = {
            from: { host: fromHost, port: Number(fromPort) },
            to: { host: toHost, port: Number(toPort), pid: servers.get(Number(toPort))?.daemon.pid ?? -1 },
            at: event.at,
            afterKillMs: lastKillAt === undefined ? undefined : event.at - lastKillAt,
          };
          return true;
        },
        { timeoutMs, intervalMs: 20 },
      ).catch((error: Error) => {
        throw new Error(`${error.message}\nsentinel events: ${events.map((event) => `${event.channel} ${event.message}`).join('\n')}`);
      });
      return found!;
    },
    events: () => [...events],
    async close() {
      await killAll();
      await dir.remove();
    },
  };
}
