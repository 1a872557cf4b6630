import { execFileSync } from 'node:child_process';
import { ROOT } from './processes.js';

/**
 * Servers and commands the tests start run the built service (dist/), as `npm start` does:
 * rebuilt here when src/ is newer, so that no test runs yesterday's code.
 */
export default function buildService() {
  execFileSync('npm', ['run', '--silent', 'build:stale'], { cwd: ROOT, stdio: 'inherit' });
}
