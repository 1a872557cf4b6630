import pino, { type DestinationStream } from 'pino';

/** LOG_FORMAT: `auto` is pretty on a terminal and JSON otherwise. */
export type LogFormatSetting = 'auto' | 'json' | 'pretty';

/**
 * How log lines are written: pretty for a person at a terminal, JSON whenever standard output goes
 * elsewhere (a container's log driver, a pipe, a file, the tests), where a program reads them.
 */
export function logFormat(setting: LogFormatSetting, stdoutIsTTY: boolean | undefined): 'json' | 'pretty' {
  if (setting !== 'auto') return setting;
  return stdoutIsTTY === true ? 'pretty' : 'json';
}

/**
 * JSON lines are gathered and written together once this many bytes wait (pino's documented
 * asynchronous mode), so under load the log costs a system call per batch, not per request.
 */
const FLUSH_BYTES = 4096;
/** And at least this often, so that the lines of a quiet moment are not held back. */
const FLUSH_INTERVAL_MS = 100;

export interface LogOutputOptions {
  /** A file descriptor (stdout by default), or a stream for pretty lines. */
  destination?: number | NodeJS.WritableStream;
  /** LOG_SYNC: each line written before the call that logs it returns, one system call per line. */
  sync?: boolean;
}

export interface LogOutput {
  stream: DestinationStream;
  /**
   * Writes out whatever is buffered, after any write under way; resolves when it is written, or
   * lost to an output that has gone (EPIPE). Called when the app closes and on a fatal error.
   */
  flush: () => Promise<void>;
}

/**
 * Where the logger writes. JSON goes to stdout buffered and asynchronously unless `sync` is asked
 * for. Pretty lines are formatted in this thread by pino-pretty (loaded only then) and written
 * synchronously, which a terminal's few lines a second afford.
 */
export async function logOutput(format: 'json' | 'pretty', { destination = 1, sync = false }: LogOutputOptions = {}): Promise<LogOutput> {
  if (format === 'json') {
    if (typeof destination !== 'number') return { stream: destination, flush: async () => {} };
    if (sync) return { stream: pino.destination({ dest: destination, sync: true }), flush: async () => {} };
    const stream = pino.destination({ dest: destination, sync: false, minLength: FLUSH_BYTES });
    // The timer runs only while lines wait (sonic-boom's periodicFlush would write an empty buffer
    // every 100 ms on an idle server): armed by a line, and after each write for the lines logged
    // while it was under way, which a flush then leaves. Unref'd, it keeps no process alive; at exit
    // pino writes what is left synchronously (its own exit handler).
    let timer: NodeJS.Timeout | undefined;
    const flushSoon = () => {
      timer ??= setTimeout(() => {
        timer = undefined;
        // Ended meanwhile (sonic-boom's types omit the flag): the close waits for the file's fsync, and a flush now would throw.
        if (!(stream as typeof stream & { destroyed: boolean }).destroyed) stream.flush();
      }, FLUSH_INTERVAL_MS).unref();
    };
    stream.on('write', (bytes: number) => bytes > 0 && flushSoon());
    stream.once('close', () => clearTimeout(timer));
    // As pino's own EPIPE handler does, which replaces write in its turn: no timer once the output has gone.
    const write = stream.write.bind(stream);
    stream.write = (line: string) => {
      const belowHighWaterMark = write(line);
      flushSoon();
      return belowHighWaterMark;
    };
    return {
      stream,
      // Unlike flushSync, flush waits for the write under way: lines neither overtake it nor are
      // left in it at exit. A closed pipe fails the flush, whose lines are lost (pino then stops
      // logging), and closing goes on.
      flush: () => new Promise<void>((resolve) => stream.flush(() => resolve())),
    };
  }
  const { default: pretty } = await import('pino-pretty');
  const stream = pretty({
    destination,
    sync: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
    // With colours only where the terminal has them (pino-pretty's own check, NO_COLOR and FORCE_COLOR included).
  });
  return { stream, flush: async () => {} };
}

/**
 * Durations in log lines, in milliseconds to two decimals (10 µs): finer digits are timer and
 * scheduling noise, and shorter lines. `ms` keeps its name and unit, so queries on it still hold.
 */
export const roundMs = (ms: number) => Math.round(ms * 100) / 100;
