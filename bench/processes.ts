import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { ROOT } from '../harness/processes.js';

/** Compiles the service, so `ours` is exactly what `npm start` runs. */
export async function buildService(): Promise<void> {
  const build = spawn('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: 'inherit' });
  const code = await new Promise<number | null>((resolve) => build.once('exit', resolve));
  if (code !== 0) throw new Error(`npm run build exited with ${code}`);
}

/** The whole machine's CPU time so far, in clock ticks, from the first line of /proc/stat. */
interface MachineTicks {
  total: number;
  /** Time the hypervisor gave this machine's virtual CPUs to another guest while they had work. */
  steal: number;
}

function machineTicks(): MachineTicks {
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice (guest time is already in user).
  const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  return { total: fields.reduce((sum, ticks) => sum + ticks, 0), steal: fields[7] ?? 0 };
}

/**
 * Starts watching the hypervisor's steal time; the function returned gives the share of the
 * machine's CPU time stolen since (0 to 1). A shared host's neighbours slow every server down
 * at once, CPU per request included, so a measurement taken under steal is marked as such.
 */
export function watchSteal(): () => number {
  const before = machineTicks();
  return () => {
    const after = machineTicks();
    const total = after.total - before.total;
    return total > 0 ? (after.steal - before.steal) / total : 0;
  };
}
