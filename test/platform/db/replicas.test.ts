import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/platform/config/load.js';
import { SettingNeedsError } from '../../../src/platform/config/errors.js';
import { insertedWalEnd, parseLsn, replicaName } from '../../../src/platform/db/replicas.js';

// The pieces of read routing over replicas that need no server; test/engines/replicas.test.ts
// runs the routing on a real primary and streaming standby.

describe('DATABASE_REPLICA_URLS', () => {
  const primary = 'postgres://pets@db:5432/pets';

  it('is a comma-separated list of PostgreSQL URLs, spaces around the commas allowed', () => {
    const config = loadConfig({
      DATABASE_URL: primary,
      DATABASE_REPLICA_URLS: 'postgres://pets@replica-1:5432/pets, postgresql://pets@replica-2/pets',
    });
    expect(config.databaseReplicaUrls).toEqual(['postgres://pets@replica-1:5432/pets', 'postgresql://pets@replica-2/pets']);
    expect(config.DATABASE_REPLICA_MAX_LAG_MS).toBe(5_000);
    expect(config.DATABASE_REPLICA_TIMEOUT_MS).toBe(1_000);
  });

  it('unset, names no replica', () => {
    expect(loadConfig({ DATABASE_URL: primary }).databaseReplicaUrls).toEqual([]);
  });

  it('is refused without DATABASE_URL: the embedded database has no replicas', () => {
    expect(() => loadConfig({ DATABASE_REPLICA_URLS: 'postgres://pets@replica-1/pets' })).toThrow(SettingNeedsError);
    expect(() => loadConfig({ DATABASE_REPLICA_URLS: 'postgres://pets@replica-1/pets' })).toThrow(/needs DATABASE_URL/);
  });

  it.each(['replica-1:5432', 'postgres://a/pets,,postgres://b/pets', 'redis://r:6379'])('refuses %j', (value) => {
    expect(() => loadConfig({ DATABASE_URL: primary, DATABASE_REPLICA_URLS: value })).toThrow('Invalid DATABASE_REPLICA_URLS');
  });

  it('names a replica without its credentials', () => {
    expect(replicaName('postgres://pets:secret@replica-1:5432/pets')).toBe('replica-1:5432/pets');
  });
});

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
