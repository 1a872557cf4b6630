import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { load } from '../../bench/load.js';
import { countWriteLines, countWrites } from '../../bench/syscalls.js';
import { startServer } from '../../harness/processes.js';

/** strace is installed and may attach to a process it did not start (root, or Yama's ptrace_scope 0). */
function straceCanAttach(): boolean {
  try {
    execFileSync('strace', ['-V'], { stdio: 'ignore' });
  } catch {
    return false;
  }
  const scope = '/proc/sys/kernel/yama/ptrace_scope';
  return process.getuid?.() === 0 || !existsSync(scope) || readFileSync(scope, 'utf8').trim() === '0';
}

// A server whose writes are known: per request one log line to stdout (its log file), written
// before the answer so that it is done when the client has the answer, then the answer in one end().
const LOGGING_SERVER = `
import { createServer } from 'node:http';
import { writeSync } from 'node:fs';
createServer((request, response) => {
  writeSync(1, 'request ' + request.url + '\\n');
  response.setHeader('content-type', 'application/json');
  response.end('{"ok":true}');
}).listen(Number(process.env.PORT), '127.0.0.1');
`;

describe('bench: write system calls per response', () => {
  it("sorts strace's lines by where each write went; a resumed call is not a new one", () => {
    const output = [
      '101   write(23<TCP:[127.0.0.1:4567->127.0.0.1:54746]>, ""..., 161) = 161',
      '101   writev(24<TCP6:[[::1]:4567->[::1]:50000]>, [...], 2) = 200',
      '102   write(1</srv/bench/results/ours.log>, ""..., 90 <unfinished ...>',
      '101   write(25<TCP:[127.0.0.1:36000->127.0.0.1:5432]>, ""..., 40) = 40',
      '101   sendto(26<UNIX-STREAM:[777->778]>, ""..., 10, 0, NULL, 0) = 10',
      '103   write(9<anon_inode:[eventfd]>, ""..., 8) = 8',
      '102   <... write resumed>) = 90',
      '101   +++ exited with 0 +++',
    ].join('\n');
    expect(countWriteLines(output, { port: 4567, logFile: '/srv/bench/results/ours.log' })).toEqual({
      byTarget: { client: 2, log: 1, otherSockets: 2, other: 1 },
      clientByCall: { write: 1, writev: 1 },
    });
  });

  it.skipIf(!straceCanAttach())('counts, with strace attached, each write of a running server to its clients and to its log', async () => {
    const server = await startServer({ name: 'bench-writes', nodeArgs: ['--input-type=module', '-e', LOGGING_SERVER], readyPath: '/' });
    try {
      const counted = await countWrites(server, async () => {
        const measured = await load(server.origin, { method: 'GET', path: '/pets' }, 4, { requests: 200 });
        return measured.responses;
      });
      expect(counted.responses).toBe(200);
      expect(counted.byTarget.client).toBe(200);
      expect(counted.byTarget.log).toBe(200);
      // Detached again: the server answers as before.
      expect((await fetch(`${server.origin}/after`)).status).toBe(200);
    } finally {
      await server.stop();
    }
  });
});
