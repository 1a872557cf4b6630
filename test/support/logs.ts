import pino from 'pino';
import { Writable } from 'node:stream';

/** Captures log lines so tests can read what the service logged. */
export function captureLogs() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  return { stream, lines, entries: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>) };
}

/** A logger whose lines are captured, for what is given a logger of its own; `warnings`: the messages it warned, in order. */
export function capturingLogger() {
  const logs = captureLogs();
  return {
    log: pino(logs.stream),
    warnings: () =>
      logs
        .entries()
        .filter((entry) => entry.level === 40)
        .map((entry) => entry.msg),
  };
}
