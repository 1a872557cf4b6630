import { join } from 'node:path';
import { engineDir, requireProgram, runCommand, waitFor, withFreshPorts, type Daemon } from './daemon.js';
import { HOST, baseRedisArgs, infoFields, redisCommand, startRedisServer } from './redis-process.js';

/**
 * A real Redis Cluster on loopback (issue #20): redis-server processes in cluster mode, each on a
 * free port with its cluster bus on another free port (cluster-port, so port + 10000 need not be
 * free), their nodes.conf in a temporary directory, joined by `redis-cli --cluster create`.
 */

export interface ClusterOptions {
  /** At least 3 (redis-cli's minimum). */
  masters?: number;
  replicasPerMaster?: number;
  /** cluster-node-timeout: how long a node may not answer before it is failed; failover takes about twice this. */
  nodeTimeoutMs?: number;
  /** requirepass and masterauth on every node. */
  password?: string;
}

export interface ClusterNode {
  host: string;
  port: number;
  /** The cluster bus port. */
  busPort: number;
  /** The running process's PID (a new one after restart()). */
  pid: number;
  /** As last seen: at start, or at the last masters() or topology() call. */
  role: 'master' | 'replica';
}

export interface ClusterNodeState {
  id: string;
  host: string;
  port: number;
  role: 'master' | 'replica';
  /** For a replica, its master's id. */
  masterId?: string;
  /** Flagged fail or fail? by the node asked. */
  failing: boolean;
  /** Slot ranges served, [first, last] inclusive. */
  slots: [number, number][];
}

export interface RedisCluster {
  nodes: ClusterNode[];
  /** For clients: 'host:port,host:port,...' of every node. */
  seeds: string;
  password?: string;
  /** The cluster as a live node sees it now (CLUSTER NODES). */
  topology(): Promise<ClusterNodeState[]>;
  /** The masters serving slots now, failed ones left out, with their PIDs. */
  masters(): Promise<(ClusterNodeState & { pid: number })[]>;
  /** A key whose slot the master on this port serves. */
  keyOn(port: number): Promise<string>;
  /**
   * Resolves, to the ms it took, once the running nodes agree on a healthy cluster: each says
   * cluster_state:ok and sees the same roles, all 16384 slots served by running masters, no running
   * node flagged failing, every replica synced. After kill(master): once failover is done.
   */
  waitUntilOk(timeoutMs?: number): Promise<number>;
  /** Resolves once every running replica has everything its master has (replication offsets equal): no write is lost to a kill then. */
  waitForReplication(timeoutMs?: number): Promise<number>;
  /** SIGKILL: a crash. Resolves once the process is gone. */
  kill(port: number): Promise<void>;
  /**
   * Starts the node on its port again, with its nodes.conf, and resolves once it has rejoined (no
   * node flags it failing, see waitUntilOk): a former master comes back as a replica.
   */
  restart(port: number): Promise<void>;
  /** Kills every node and removes the directory. */
  close(): Promise<void>;
}

function parseClusterNodes(text: string): ClusterNodeState[] {
  return text
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => {
      const [id = '', address = '', flags = '', master = '-', , , , , ...slotFields] = line.trim().split(' ');
      const hostPort = address.split('@')[0] ?? '';
      const separator = hostPort.lastIndexOf(':');
      const flagList = flags.split(',');
      const slots = slotFields
        .filter((field) => !field.startsWith('['))
        .map((field) => {
          const [first = 0, last = first] = field.split('-').map(Number);
          return [first, last] as [number, number];
        });
      return {
        id,
        host: hostPort.slice(0, separator),
        port: Number(hostPort.slice(separator + 1)),
        role: flagList.includes('master') ? ('master' as const) : ('replica' as const),
        masterId: master === '-' ? undefined : master,
        failing: flagList.includes('fail') || flagList.includes('fail?'),
        slots,
      };
    });
}

export async function startRedisCluster(options: ClusterOptions = {}): Promise<RedisCluster> {
  const { masters: masterCount = 3, replicasPerMaster = 1, nodeTimeoutMs = 1_000, password } = options;
  if (masterCount < 3) throw new Error('a Redis Cluster needs at least 3 masters');
  const redisCli = requireProgram('redis-cli');
  const dir = await engineDir('redis-cluster');
  const daemons = new Map<number, Daemon>();
  const argsOf = new Map<number, string[]>();
  const nodes: ClusterNode[] = [];

  const clusterArgs = (port: number, busPort: number) => [
    ...baseRedisArgs(port, dir.path, password),
    '--cluster-enabled',
    'yes',
    '--cluster-port',
    String(busPort),
    '--cluster-config-file',
    join(dir.path, `nodes-${port}.conf`),
    '--cluster-node-timeout',
    String(nodeTimeoutMs),
    // A replica fails over however long its master was gone: tests kill masters at any moment.
    '--cluster-replica-validity-factor',
    '0',
    '--cluster-announce-ip',
    HOST,
  ];

  const killAll = async () => {
    await Promise.all([...daemons.values()].map((daemon) => daemon.stop('SIGKILL')));
  };

  const ask = async (port: number, args: (string | number)[]) => redisCommand(port, args, password);
  const running = () => nodes.filter((node) => daemons.get(node.port)?.running());

  async function topology(): Promise<ClusterNodeState[]> {
    let lastError: unknown = new Error('no node is running');
    for (const node of running()) {
      try {
        const states = parseClusterNodes(String(await ask(node.port, ['CLUSTER', 'NODES'])));
        for (const state of states) {
          const known = nodes.find((candidate) => candidate.port === state.port);
          if (known) known.role = state.role;
        }
        return states;
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  }

  async function masters() {
    const states = await topology();
    return states
      .filter((state) => state.role === 'master' && !state.failing && state.slots.length > 0)
      .map((state) => ({ ...state, pid: daemons.get(state.port)?.pid ?? -1 }));
  }

  /**
   * Whether the running nodes agree on a healthy cluster: each says cluster_state:ok, its view of
   * the running nodes is the same as the others' (roles spread by gossip), none of those is flagged
   * failing or is a master without slots (a former master restarted a moment ago), every master
   * serving slots is running (one killed a moment ago is listed until the others fail it), all
   * 16384 slots are served, and every replica's link to its master is up.
   */
  async function healthy(): Promise<boolean> {
    const live = running();
    const livePorts = new Set(live.map((node) => node.port));
    const views = new Set<string>();
    for (const node of live) {
      const info = String(await ask(node.port, ['CLUSTER', 'INFO']));
      if (!info.includes('cluster_state:ok')) return false;
      const states = parseClusterNodes(String(await ask(node.port, ['CLUSTER', 'NODES'])));
      const serving = states.filter((state) => state.role === 'master' && !state.failing && state.slots.length > 0);
      if (!serving.every((state) => livePorts.has(state.port))) return false;
      const covered = serving.flatMap((state) => state.slots).reduce((sum, [first, last]) => sum + last - first + 1, 0);
      if (covered !== 16_384) return false;
      const liveStates = states.filter((state) => livePorts.has(state.port));
      if (liveStates.length !== live.length) return false;
      if (liveStates.some((state) => state.failing || (state.role === 'master' && state.slots.length === 0))) return false;
      views.add(
        liveStates
          .map((state) => `${state.port}:${state.role}:${state.masterId ?? ''}`)
          .sort()
          .join(' '),
      );
      const replication = infoFields(await ask(node.port, ['INFO', 'replication']));
      if (replication.role === 'slave' && replication.master_link_status !== 'up') return false;
    }
    if (views.size !== 1) return false;
    await topology(); // the nodes' roles, as all now agree
    return true;
  }

  const waitUntilOk = (timeoutMs = 20_000) => waitFor('a healthy cluster', healthy, { timeoutMs, intervalMs: 100 });

  try {
    const total = masterCount * (1 + replicasPerMaster);
    await Promise.all(
      Array.from({ length: total }, () =>
        withFreshPorts(2, async (ports) => {
          const [port, busPort] = ports as [number, number];
          const args = clusterArgs(port, busPort);
          const daemon = await startRedisServer(`redis cluster node ${port}`, args, { port, dir: dir.path, password });
          daemons.set(port, daemon);
          argsOf.set(port, args);
          nodes.push({ host: HOST, port, busPort, pid: daemon.pid, role: 'master' });
        }),
      ),
    );
    nodes.sort((a, b) => a.port - b.port);
    const auth = password ? ['-a', password, '--no-auth-warning'] : [];
    const addresses = nodes.map((node) => `${HOST}:${node.port}`);
    const create = ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicasPerMaster), '--cluster-yes'];
    await runCommand(redisCli, [...auth, ...create], { cwd: dir.path });
    await waitFor(
      'every node in the cluster, with its role',
      async () => {
        for (const node of nodes) {
          const info = String(await ask(node.port, ['CLUSTER', 'INFO']));
          if (!info.includes(`cluster_known_nodes:${total}`)) return false;
        }
        if (!(await healthy())) return false;
        const roles = nodes.map((node) => node.role);
        return roles.filter((role) => role === 'master').length === masterCount;
      },
      { daemons: [...daemons.values()], timeoutMs: 30_000, intervalMs: 100 },
    );
  } catch (error) {
    await killAll();
    await dir.remove();
    throw error;
  }

  const nodeOn = (port: number) => {
    const node = nodes.find((candidate) => candidate.port === port);
    if (!node) throw new Error(`no cluster node on port ${port}`);
    return node;
  };

  return {
    nodes,
    seeds: nodes.map((node) => `${node.host}:${node.port}`).join(','),
    password,
    topology,
    masters,
    async keyOn(port) {
      const master = (await masters()).find((state) => state.port === port);
      if (!master) throw new Error(`no master serving slots on port ${port}`);
      for (let i = 0; i < 100_000; i++) {
        const key = `engines-test-key-${i}`;
        const slot = Number(await ask(port, ['CLUSTER', 'KEYSLOT', key]));
        if (master.slots.some(([first, last]) => slot >= first && slot <= last)) return key;
      }
      throw new Error(`no key found for the master on ${port}`);
    },
    waitUntilOk,
    waitForReplication: (timeoutMs = 10_000) =>
      waitFor(
        'every replica has all its master has',
        async () => {
          for (const node of running()) {
            const replica = infoFields(await ask(node.port, ['INFO', 'replication']));
            if (replica.role !== 'slave') continue;
            if (replica.master_link_status !== 'up') return false;
            const master = infoFields(await ask(Number(replica.master_port), ['INFO', 'replication']));
            if (replica.slave_repl_offset !== master.master_repl_offset) return false;
          }
          return true;
        },
        { timeoutMs },
      ),
    async kill(port) {
      nodeOn(port);
      await daemons.get(port)?.stop('SIGKILL');
    },
    async restart(port) {
      const node = nodeOn(port);
      if (daemons.get(port)?.running()) throw new Error(`the node on ${port} is running`);
      const daemon = await startRedisServer(`redis cluster node ${port}`, argsOf.get(port)!, { port, dir: dir.path, password });
      daemons.set(port, daemon);
      node.pid = daemon.pid;
      await waitUntilOk();
    },
    async close() {
      await killAll();
      await dir.remove();
    },
  };
}
