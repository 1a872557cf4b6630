import { execFileSync } from 'node:child_process';
import { ROOT } from '../../harness/processes.js';

/**
 * Servers and commands the tests start run the built service (dist/), as `npm start` does:
 * rebuilt here when src/ is newer, so that no test runs yesterday's code. The embedded
 * database's template is made here too when a migration is new, once rather than by every
 * test process at once.
 */
export default function buildService() {
  execFileSync('npm', ['run', '--silent', 'build:stale'], { cwd: ROOT, stdio: 'inherit' });
  execFileSync(process.execPath, ['dist/cli/prepare-embedded.js'], { cwd: ROOT, stdio: 'inherit' });
}
