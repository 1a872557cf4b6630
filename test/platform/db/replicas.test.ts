import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config/load.js';
import { SettingNeedsError } from '../../../src/platform/config/errors.js';
import { replicaName } from '../../../src/platform/db/replicas.js';

// The pieces of read routing over replicas that need no server (the WAL arithmetic: wal-position.test.ts);
// test/engines/replicas.test.ts runs the routing on a real primary and streaming standby.

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
