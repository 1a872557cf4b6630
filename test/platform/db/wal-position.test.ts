import { describe, expect, it } from 'vitest';
import { hasReplayed, insertedWalEnd, lagMs, parseLsn, withSample } from '../../../src/platform/db/wal-position.js';

// The WAL arithmetic the replica router decides by (src/platform/db/wal-position.ts), on values as
// PostgreSQL writes them; test/engines/replicas.test.ts runs the router on a real primary and standby.

const at = (ms: number, lsn: string) => ({ at: ms, lsn: parseLsn(lsn) });

describe('WAL positions', () => {
  it('compare by their value, not as text', () => {
    expect(parseLsn('0/16B3748')).toBe(0x16b3748n);
    expect(parseLsn('1/0')).toBeGreaterThan(parseLsn('0/FFFFFFFF'));
    expect(parseLsn('A/0')).toBeGreaterThan(parseLsn('9/FFFFFFFF'));
    expect(parseLsn('0/10')).toBeGreaterThan(parseLsn('0/F'));
    expect(parseLsn('FFFFFFFF/FFFFFFFF')).toBe(2n ** 64n - 1n);
  });

  it('refuse what is not one', () => {
    for (const text of ['', '0', '0/', '/0', 'G/0', '0/0/0', '123456789/0']) expect(() => parseLsn(text)).toThrow('Not a WAL position');
  });

  it('of an insert at the start of a page end at the page boundary, where a replica that has replayed everything stands', () => {
    const layout = { blockSize: 8192, segmentSize: 16 * 1024 * 1024 };
    expect(insertedWalEnd(3n * 8192n + 24n, layout)).toBe(3n * 8192n);
    expect(insertedWalEnd(5n * 16777216n + 40n, layout)).toBe(5n * 16777216n);
    expect(insertedWalEnd(3n * 8192n + 40n, layout)).toBe(3n * 8192n + 40n);
    expect(insertedWalEnd(3n * 8192n + 128n, layout)).toBe(3n * 8192n + 128n);
  });
});

describe('a replica has replayed a position', () => {
  it('at it or past it, by value', () => {
    expect(hasReplayed(parseLsn('0/16B3748'), parseLsn('0/16B3748'))).toBe(true);
    expect(hasReplayed(parseLsn('1/0'), parseLsn('0/FFFFFFFF'))).toBe(true);
    expect(hasReplayed(parseLsn('0/FFFFFFFF'), parseLsn('1/0'))).toBe(false);
    expect(hasReplayed(parseLsn('0/F'), parseLsn('0/10'))).toBe(false);
  });

  it('not while its position is unknown, even for the first position there is', () => {
    expect(hasReplayed(undefined, parseLsn('0/0'))).toBe(false);
  });
});

describe("the primary's recent positions", () => {
  const bounds = { spacingMs: 50, keptMs: 10_000 };

  it('start with the first one read', () => {
    expect(withSample([], at(1_000, '0/16B3748'), bounds)).toEqual([at(1_000, '0/16B3748')]);
  });

  it('take a new sample once the spacing has passed', () => {
    expect(withSample([at(1_000, '0/16B3748')], at(1_050, '0/16B3800'), bounds)).toEqual([at(1_000, '0/16B3748'), at(1_050, '0/16B3800')]);
  });

  it('within the spacing, move the last sample on to a further position, keeping its time', () => {
    expect(withSample([at(1_000, '0/16B3748')], at(1_020, '0/16B3800'), bounds)).toEqual([at(1_000, '0/16B3800')]);
    expect(withSample([at(1_000, '0/16B3800')], at(1_020, '0/16B3748'), bounds)).toEqual([at(1_000, '0/16B3800')]);
  });

  it('drop the samples older than kept, but never the newest', () => {
    const history = [at(0, '0/1000000'), at(100, '0/1000100'), at(5_000, '0/1000200')];
    expect(withSample(history, at(10_050, '0/1000300'), bounds)).toEqual([
      at(100, '0/1000100'),
      at(5_000, '0/1000200'),
      at(10_050, '0/1000300'),
    ]);
    expect(withSample([at(0, '0/1000000'), at(100, '0/1000100')], at(120, '0/1000200'), { spacingMs: 50, keptMs: 10 })).toEqual([
      at(100, '0/1000200'),
    ]);
  });

  it('are not changed by adding one', () => {
    const history = [at(1_000, '0/16B3748')];
    withSample(history, at(1_020, '0/16B3800'), bounds);
    expect(history).toEqual([at(1_000, '0/16B3748')]);
  });
});

describe("a replica's lag", () => {
  const keptMs = 10_000;
  const history = [at(1_000, '0/3000000'), at(1_100, '0/3000100'), at(1_200, '0/3000200')];

  it('is none once it has replayed the newest position', () => {
    expect(lagMs(history, parseLsn('0/3000200'), 1_500, keptMs)).toBe(0);
    expect(lagMs(history, parseLsn('1/0'), 1_500, keptMs)).toBe(0);
  });

  it('runs from the first position it has not replayed', () => {
    expect(lagMs(history, parseLsn('0/3000100'), 1_500, keptMs)).toBe(300);
    expect(lagMs(history, parseLsn('0/30000FF'), 1_500, keptMs)).toBe(400);
  });

  it('behind the oldest position kept, is at least as long as positions are kept', () => {
    expect(lagMs(history, parseLsn('0/2FFFFFF'), 1_500, keptMs)).toBe(keptMs);
    expect(lagMs(history, parseLsn('0/2FFFFFF'), 30_000, keptMs)).toBe(29_000);
  });

  it('before any position of the primary is known, is as long as positions are kept', () => {
    expect(lagMs([], parseLsn('0/16B3748'), 1_500, keptMs)).toBe(keptMs);
  });
});
