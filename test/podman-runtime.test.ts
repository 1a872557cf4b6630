import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect } from 'vitest';
import { tempDirTest } from './support/fixtures.js';
import { runCommand } from '../harness/processes.js';

// .ci/compose-check.sh runs podman with runc where crun refuses every container; these are its two steps.
const test = tempDirTest('podman-runtime-');

const sourced = async (call: string, ...args: string[]) => {
  const { code, stdout, stderr } = await runCommand('bash', ['-c', `source .ci/podman-runtime.sh && ${call} "$@"`, 'bash', ...args]);
  expect(code, stderr).toBe(0);
  return stdout.trim();
};

const mountinfo = (...mounts: Array<[string, string]>) =>
  mounts.map(([point, type], i) => `${30 + i} 23 0:${28 + i} / ${point} rw,relatime shared:${i} - ${type} ${type} rw\n`).join('');

/** The table each key of a TOML file is in. */
const tableOfEachKey = (toml: string) => {
  let table = '';
  const keys: Record<string, string> = {};
  for (const line of toml.split('\n')) {
    table = /^\[(.+)\]$/.exec(line)?.[1] ?? table;
    const key = /^(\w+) *=/.exec(line)?.[1];
    if (key) {
      expect(keys, `${key} is set twice`).not.toHaveProperty(key);
      keys[key] = table;
    }
  }
  return keys;
};

describe('the cgroup layout, as crun tells it apart', () => {
  test.for([
    ['unified', 'cgroup2 at /sys/fs/cgroup', mountinfo(['/', 'ext4'], ['/sys/fs/cgroup', 'cgroup2'])],
    [
      'hybrid',
      'v1 controllers and cgroup2 at unified/',
      mountinfo(['/sys/fs/cgroup', 'tmpfs'], ['/sys/fs/cgroup/cpu', 'cgroup'], ['/sys/fs/cgroup/unified', 'cgroup2']),
    ],
    ['legacy', 'v1 controllers alone', mountinfo(['/sys/fs/cgroup', 'tmpfs'], ['/sys/fs/cgroup/cpu', 'cgroup'])],
    ['unified', 'cgroup2 mounted over a tmpfs', mountinfo(['/sys/fs/cgroup', 'tmpfs'], ['/sys/fs/cgroup', 'cgroup2'])],
  ] as const)('is %s with %s', async ([mode, , mounts], { dir }) => {
    writeFileSync(join(dir, 'mountinfo'), mounts);
    expect(await sourced('cgroup_mode', join(dir, 'mountinfo'))).toBe(mode);
  });

  test("is what the filesystems at /sys/fs/cgroup and /sys/fs/cgroup/unified say on this machine (crun's statfs)", async () => {
    const [root, unified] = (await runCommand('stat', ['-fc', '%T', '/sys/fs/cgroup', '/sys/fs/cgroup/unified'])).stdout.split('\n');
    const expected = root === 'cgroup2fs' ? 'unified' : unified === 'cgroup2fs' ? 'hybrid' : 'legacy';
    expect(await sourced('cgroup_mode')).toBe(expected);
  });
});

describe('the runtime set in containers.conf', () => {
  const containers = '[containers]\ndefault_ulimits = ["nofile=1024:1024"]\n';

  test.for([
    ['no file yet', undefined],
    ['the [containers] table compose-check.sh writes', containers],
    ['an [engine] table of its own', `[engine]\ncgroup_manager = "cgroupfs"\n\n${containers}`],
    ['another runtime', `[engine]\nruntime = "crun"\n\n${containers}`],
  ])('is in [engine], over %s, and keys appended after it stay in [containers]', async ([, before], { dir }) => {
    const conf = join(dir, `containers-${before?.length ?? 0}.conf`);
    if (before !== undefined) writeFileSync(conf, before);
    await sourced('set_runtime', conf, 'runc');
    if (before === undefined) writeFileSync(conf, containers, { flag: 'a' });
    writeFileSync(conf, 'dns_options = ["timeout:1"]\n', { flag: 'a' });
    const written = readFileSync(conf, 'utf8');
    expect(written).toContain('runtime = "runc"');
    expect(tableOfEachKey(written)).toMatchObject({ runtime: 'engine', default_ulimits: 'containers', dns_options: 'containers' });
    await sourced('set_runtime', conf, 'runc');
    expect(readFileSync(conf, 'utf8'), 'a second run changes nothing').toBe(written);
  });
});
