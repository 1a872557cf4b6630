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

export interface LogOutput {
  stream: DestinationStream;
  /** Writes out whatever is still buffered; called when the app closes. */
  flush: () => void;
}

/**
 * Where the logger writes. JSON goes to stdout asynchronously: lines written while a write is under
 * way are gathered into the next one, so under load the log costs a system call per batch, not per
 * request. Pretty lines are formatted in this thread by pino-pretty (loaded only then) and written
 * synchronously, which a terminal's few lines a second afford.
 */
export async function logOutput(format: 'json' | 'pretty', destination: number | NodeJS.WritableStream = 1): Promise<LogOutput> {
  if (format === 'json') {
    if (typeof destination !== 'number') return { stream: destination, flush: () => {} };
    const stream = pino.destination({ dest: destination, sync: false });
    return {
      stream,
      flush: () => {
        try {
          stream.flushSync();
        } catch (error) {
          // The lines left are lost, and closing goes on. When whatever read the output has gone
          // (EPIPE), pino's own handler of that, as on any write, stops logging, so exit does not retry.
          if ((error as NodeJS.ErrnoException).code === 'EPIPE') stream.emit('error', error);
        }
      },
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
  return { stream, flush: () => {} };
}

/**
 * Durations in log lines, in milliseconds to two decimals (10 µs): finer digits are timer and
 * scheduling noise, and shorter lines. `ms` keeps its name and unit, so queries on it still hold.
 */
export const roundMs = (ms: number) => Math.round(ms * 100) / 100;
