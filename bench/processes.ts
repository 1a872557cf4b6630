import { spawn } from 'node:child_process';
import { ROOT } from '../test/support/processes.js';

/** Compiles the service, so `ours` is exactly what `npm start` runs. */
export async function buildService(): Promise<void> {
  const build = spawn('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: 'inherit' });
  const code = await new Promise<number | null>((resolve) => build.once('exit', resolve));
  if (code !== 0) throw new Error(`npm run build exited with ${code}`);
}
