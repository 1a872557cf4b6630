import { describe, expect, it } from 'vitest';
import { SingleFlight } from '../../../src/platform/lib/single-flight.js';

/** A load that resolves when told to, counting how often it was started. */
function loader<T>() {
  const resolvers: Array<(value: T) => void> = [];
  const load = () => new Promise<T>((resolve) => resolvers.push(resolve));
  return { load, resolvers };
}

describe('SingleFlight', () => {
  it('shares one load among concurrent callers of a key, and keeps its value once', async () => {
    const flights = new SingleFlight<string>();
    const { load, resolvers } = loader<number>();
    const kept: number[] = [];
    const first = flights.run('k', load, (value) => kept.push(value));
    const second = flights.run('k', load, (value) => kept.push(value));
    const other = flights.run('other', load, (value) => kept.push(value));
    expect(resolvers).toHaveLength(2);
    resolvers[0]!(1);
    resolvers[1]!(2);
    expect(await Promise.all([first, second, other])).toEqual([1, 1, 2]);
    expect(kept).toEqual([1, 2]);
    // Done, it is no longer joined: the next call loads again.
    void flights.run('k', load, () => {});
    expect(resolvers).toHaveLength(3);
  });

  it('after an invalidation of its scope, a load under way is neither joined nor kept; other scopes are untouched', async () => {
    const flights = new SingleFlight<string>();
    const { load, resolvers } = loader<string>();
    const kept: string[] = [];
    const stale = flights.run('list', load, (value) => kept.push(value), 'available');
    const elsewhere = flights.run('pet', load, (value) => kept.push(value), 'pets');
    flights.invalidate('available');
    const fresh = flights.run('list', load, (value) => kept.push(value), 'available');
    expect(resolvers).toHaveLength(3);
    expect(flights.run('pet', load, () => {}, 'pets')).toBe(elsewhere);
    resolvers[0]!('before the write');
    resolvers[1]!('pet');
    resolvers[2]!('after the write');
    expect(await Promise.all([stale, elsewhere, fresh])).toEqual(['before the write', 'pet', 'after the write']);
    expect(kept).toEqual(['pet', 'after the write']);
  });

  it('invalidateAll detaches every load under way, whatever its scope', async () => {
    const flights = new SingleFlight<string>();
    const { load, resolvers } = loader<number>();
    const kept: number[] = [];
    const before = [flights.run('a', load, (value) => kept.push(value)), flights.run('b', load, (value) => kept.push(value), 'x')];
    flights.invalidateAll();
    const after = flights.run('a', load, (value) => kept.push(value));
    expect(resolvers).toHaveLength(3);
    resolvers.forEach((resolve, index) => resolve(index));
    expect(await Promise.all([...before, after])).toEqual([0, 1, 2]);
    expect(kept).toEqual([2]);
  });

  it('a failed load rejects every caller that joined it, keeps nothing, and is not joined afterwards', async () => {
    const flights = new SingleFlight<string>();
    let loads = 0;
    const failing = () => {
      loads++;
      return Promise.reject(new Error('down'));
    };
    const kept: unknown[] = [];
    const calls = [flights.run('k', failing, (value) => kept.push(value)), flights.run('k', failing, (value) => kept.push(value))];
    await expect(Promise.all(calls)).rejects.toThrow('down');
    await expect(flights.run('k', failing, () => {})).rejects.toThrow('down');
    expect(loads).toBe(2);
    expect(kept).toEqual([]);
  });
});
