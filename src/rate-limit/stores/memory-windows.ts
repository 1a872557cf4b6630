import type { Limits } from '../../plans/limits.js';
import { NO_COUNT, windowStart, type WindowCount, type WindowUsage } from './store.js';

/** One window length's counts: its current fixed window's start and count, and the previous fixed window's count. */
interface Counter {
  start: number;
  current: number;
  previous: number;
}

/**
 * A subject's counts in this process, by window length: windows of one length count the same
 * requests whatever their names, limits and algorithms, so they share one counter.
 */
export class WindowCounters {
  readonly #byLength = new Map<number, Counter>();

  /** The counts of each of `limits`' windows at `now`, in their order, as a roll-over would leave them: nothing written. */
  countsAt(limits: Limits, now: number): WindowCount[] {
    return limits.map(({ windowSeconds }) => {
      const length = windowSeconds * 1000;
      const counter = this.#byLength.get(length);
      if (!counter) return NO_COUNT;
      const start = windowStart(now, length);
      if (counter.start === start) return { current: counter.current, previous: counter.previous };
      return counter.start === start - length ? { current: 0, previous: counter.current } : NO_COUNT;
    });
  }

  /** Counts `cost` once in each length of `limits`' windows, rolled over to `now`. */
  add(limits: Limits, now: number, cost: number) {
    limits.forEach(({ windowSeconds }, i) => {
      if (sameLengthAsBefore(limits, i)) return;
      const length = windowSeconds * 1000;
      const start = windowStart(now, length);
      const counter = this.#byLength.get(length);
      if (!counter) return void this.#byLength.set(length, { start, current: cost, previous: 0 });
      if (counter.start !== start)
        Object.assign(counter, { start, current: 0, previous: counter.start === start - length ? counter.current : 0 });
      counter.current += cost;
    });
  }

  /** Takes `cost` back from each length a decision counted in, where that window has not rolled over since. */
  takeBack(windows: readonly WindowUsage[], cost: number) {
    windows.forEach(({ windowSeconds, start }, i) => {
      if (sameLengthAsBefore(windows, i)) return;
      const counter = this.#byLength.get(windowSeconds * 1000);
      if (counter?.start === start) counter.current = Math.max(0, counter.current - cost);
    });
  }

  /** Whether nothing counted matters at `now`: every counter older than the window before its current one. */
  stale(now: number) {
    for (const [length, counter] of this.#byLength) if (counter.start + 2 * length > now) return false;
    return true;
  }
}

/** Windows come shortest first, so two of one length are neighbours: the second shares the first's counter, counted once. */
const sameLengthAsBefore = (windows: ReadonlyArray<{ windowSeconds: number }>, i: number) =>
  i > 0 && windows[i - 1]!.windowSeconds === windows[i]!.windowSeconds;
