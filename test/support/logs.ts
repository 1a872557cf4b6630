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
