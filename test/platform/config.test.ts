import { readFileSync } from 'node:fs';
import type { TSchema } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { DOCS_COMMAND, generatedFiles, settingsTable } from '../../scripts/config-docs.js';
import { redactPasswords } from '../../src/platform/config/errors.js';
import { loadConfig } from '../../src/config/load.js';
import { ConfigSchema } from '../../src/config/schema.js';

describe('configuration', () => {
  it('docs/configuration.md and .env.example are what the schema writes', () => {
    for (const { path, text } of generatedFiles()) {
      expect(readFileSync(path, 'utf8'), `${path} differs from src/config/schema.ts: run ${DOCS_COMMAND}`).toBe(text);
    }
  });

  it("the table's units say what the settings' names do, and each default's note in a larger unit is the same amount", () => {
    // Written here apart from the generator's own table of units, so that a slip in one shows against the other.
    const unitOfName: Record<string, string> = { _MS: 'ms', _SECONDS: 's', _HOURS: 'h', _BYTES: 'bytes' };
    const size: Record<string, { of: string; size: number }> = {
      ms: { of: 'time', size: 1 },
      s: { of: 'time', size: 1000 },
      min: { of: 'time', size: 60_000 },
      h: { of: 'time', size: 3_600_000 },
      bytes: { of: 'size', size: 1 },
      KiB: { of: 'size', size: 1024 },
      MiB: { of: 'size', size: 1024 ** 2 },
      GiB: { of: 'size', size: 1024 ** 3 },
    };
    const rows = settingsTable()
      .split('\n')
      .slice(2)
      .map((row) => row.split(/(?<!\\)\|/).map((cell) => cell.trim()));
    let notes = 0;
    for (const [, setting, defaultCell, values] of rows) {
      const name = setting!.replaceAll('`', '');
      const unit = Object.entries(unitOfName).find(([suffix]) => name.endsWith(suffix))?.[1];
      expect(values!.match(/\((\w+)\)$/)?.[1], `${name}: the unit of its values`).toBe(unit);
      const note = defaultCell!.match(/^`(\d+)` \((\d+) (\w+)\)$/);
      if (!note) continue;
      notes++;
      const [, value, amount, noteUnit] = note;
      expect(Number(value), `${name}: its default`).toBe(ConfigSchema.properties[name as keyof typeof ConfigSchema.properties].default);
      expect(size[noteUnit!]?.of, `${name}: ${defaultCell}`).toBe(size[unit!]!.of);
      expect(Number(amount) * size[noteUnit!]!.size, `${name}: ${defaultCell}`).toBe(Number(value) * size[unit!]!.size);
    }
    expect(notes).toBeGreaterThanOrEqual(4);
  });

  it("the README's settings are settings of the schema", () => {
    const readme = readFileSync('README.md', 'utf8');
    const section = readme.slice(readme.indexOf('\n## Settings\n'), readme.indexOf('\n## ', readme.indexOf('\n## Settings\n') + 1));
    const named = [...section.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((match) => match[1]);
    expect(named.length).toBeGreaterThan(0);
    expect(named.filter((name) => !(name! in ConfigSchema.properties))).toEqual([]);
  });

  it('.env.example holds the defaults', () => {
    const values = Object.fromEntries(
      [...readFileSync('.env.example', 'utf8').matchAll(/^([A-Z_]+)=(.*)$/gm)].map((match) => [match[1], match[2]]),
    );
    expect(loadConfig(values)).toEqual(loadConfig({}));
  });

  it.each([
    ['PORT', '70000'],
    ['TRUST_PROXY', '10.0.0.0/33'],
    ['TRUST_PROXY', 'proxy.example.com'],
    ['REDIS_URL', 'http://redis'],
    ['RATE_LIMIT_BAN_SECONDS', '0'],
    ['REDIS_CLUSTER_NODES', 'redis://a:6379'],
    ['REDIS_CLUSTER_NODES', 'a:6379,b'],
    ['REDIS_SENTINELS', 'a:26379'],
    ['ADMIN_PORT', '3000'],
    ['ADMIN_PORT', 'off'],
  ])('refuses %s=%s with a message naming it', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  });

  const integerSettings = Object.entries(ConfigSchema.properties as Record<string, TSchema>).filter(
    ([, schema]) => schema.type === 'integer',
  );

  it.each(integerSettings)('takes %s in plain decimal digits only, and refuses other ways of writing a number', (name, schema) => {
    const value = (schema.default ?? schema.minimum) as number;
    expect(loadConfig({ [name]: String(value) })).toHaveProperty(name, value);
    const exponent = value.toExponential();
    for (const written of [
      exponent,
      exponent.replace('+', ''),
      `${value}.0`,
      `0x${value.toString(16)}`,
      `+${value}`,
      ` ${value}`,
      `${value}px`,
    ]) {
      expect(() => loadConfig({ [name]: written }), written).toThrow(
        `Invalid ${name}=${JSON.stringify(written)}: must be a whole number in plain digits`,
      );
    }
  });

  it.each([
    ['postgres://pets:s3cret@db:5432/pets', 'postgres://pets:***@db:5432/pets'],
    ['rediss://:s3cret@redis:6380', 'rediss://:***@redis:6380'],
    ['postgres://pets:s3c@r/et@[bad/pets', 'postgres://pets:***@[bad/pets'],
    ['postgres://a:one@r1/pets, postgres://b:two@r2/pets', 'postgres://a:***@r1/pets, postgres://b:***@r2/pets'],
    ['postgres://db/pets?user=pets&password=s3cret&sslmode=require', 'postgres://db/pets?user=pets&password=***&sslmode=require'],
    // No URL: all between the scheme and the last `@` is masked, wherever the password would be.
    ['redis:/default:s3cret@redis:6379', 'redis:***@redis:6379'],
    ['postgres:pets:s3c@ret@db/pets', 'postgres:***@db/pets'],
    ['postgres:///pets:s3cret@db/pets', 'postgres:***@db/pets'],
    ['postgres:/a:one@r1/pets, postgres://b:two@r2/pets', 'postgres:***@r1/pets, postgres://b:***@r2/pets'],
    ['postgres://pets@db:5432/pets', 'postgres://pets@db:5432/pets'],
    ['redis://redis:6379', 'redis://redis:6379'],
  ])('masks the password of %s', (text, redacted) => {
    expect(redactPasswords(text)).toBe(redacted);
  });

  // Every setting whose examples are URLs: a bad one is quoted in the error without its password.
  const urlSettings = Object.entries(ConfigSchema.properties as Record<string, TSchema>)
    .filter(([, schema]) => (schema.examples as string[] | undefined)?.some((example) => example.includes('://')))
    .map(([name]) => name);

  it.each(urlSettings)('refuses %s of another scheme naming it, with the password in it masked', (name) => {
    expect(() => loadConfig({ DATABASE_URL: 'postgres://pets@db/pets', [name]: 'ftp://pets:s3cret@host/pets' })).toThrow(
      new RegExp(`^Invalid ${name}="ftp://pets:\\*\\*\\*@host/pets": `),
    );
  });

  it.each(urlSettings)('refuses %s that is no URL (one slash), naming it, with the password in it masked', (name) => {
    const scheme = /^\w+:/.exec((ConfigSchema.properties as Record<string, TSchema>)[name]!.examples[0])![0];
    const written = `${scheme}/default:s3cret@host:6379/v1`;
    expect(() => loadConfig({ DATABASE_URL: 'postgres://pets@db/pets', [name]: written })).toThrow(
      new RegExp(`^Invalid ${name}="${scheme}\\*\\*\\*@host:6379/v1": `),
    );
    expect(() => loadConfig({ DATABASE_URL: 'postgres://pets@db/pets', [name]: written })).not.toThrow('s3cret');
  });

  it('refuses a REDIS_URL or a replica URL that is no URL, naming it, with the password in it masked', () => {
    expect(() => loadConfig({ REDIS_URL: 'redis://:s3cret@[redis' })).toThrow('Invalid REDIS_URL="redis://:***@[redis": not a URL');
    expect(() =>
      loadConfig({ DATABASE_URL: 'postgres://pets@db/pets', DATABASE_REPLICA_URLS: 'postgres://pets:s3cret@[replica/pets' }),
    ).toThrow('Invalid DATABASE_REPLICA_URLS="postgres://pets:***@[replica/pets": "postgres://pets:***@[replica/pets" is not a URL');
  });

  it('lists the values allowed for a setting that takes one of a few', () => {
    expect(() => loadConfig({ LOG_LEVEL: 'verbose' })).toThrow(
      'Invalid LOG_LEVEL="verbose": must be one of fatal, error, warn, info, debug, trace, silent',
    );
    expect(() => loadConfig({ LOG_FORMAT: 'xml' })).toThrow('must be one of auto, json, pretty');
    expect(() => loadConfig({ REDIS_TLS: 'yes' })).toThrow('Invalid REDIS_TLS="yes": must be true or false');
  });

  it('takes one kind of Redis, and Sentinels with the name of their master', () => {
    expect(() => loadConfig({ REDIS_URL: 'redis://a:6379', REDIS_CLUSTER_NODES: 'b:6379' })).toThrow(/REDIS_URL and REDIS_CLUSTER_NODES/);
    expect(() => loadConfig({ REDIS_SENTINEL_MASTER: 'pets' })).toThrow(/REDIS_SENTINELS and REDIS_SENTINEL_MASTER/);
    expect(loadConfig({ REDIS_CLUSTER_NODES: 'a:7000,[::1]:7001' }).redisTarget).toEqual({
      mode: 'cluster',
      nodes: [
        { host: 'a', port: 7000 },
        { host: '::1', port: 7001 },
      ],
    });
    expect(loadConfig({ REDIS_SENTINELS: 's1:26379,s2:26380', REDIS_SENTINEL_MASTER: 'pets' }).redisTarget).toEqual({
      mode: 'sentinel',
      sentinels: [
        { host: 's1', port: 26379 },
        { host: 's2', port: 26380 },
      ],
      masterName: 'pets',
    });
    expect(loadConfig({}).redisTarget).toBeUndefined();
  });

  it('takes TRUST_PROXY as a list of addresses and CIDRs', () => {
    expect(loadConfig({ TRUST_PROXY: ' 127.0.0.1, 10.0.0.0/8,,::1 ' }).trustedProxies).toEqual(['127.0.0.1', '10.0.0.0/8', '::1']);
    expect(loadConfig({}).trustedProxies).toEqual([]);
  });

  it('takes CORS_ORIGINS as any origin, off, or origins exactly as browsers send them', () => {
    expect(loadConfig({}).corsOrigins).toBe('*');
    expect(loadConfig({ CORS_ORIGINS: 'off' }).corsOrigins).toBe('off');
    expect(loadConfig({ CORS_ORIGINS: ' https://shop.example.com,,http://localhost:5173 ' }).corsOrigins).toEqual([
      'https://shop.example.com',
      'http://localhost:5173',
    ]);
    expect(() => loadConfig({ CORS_ORIGINS: 'https://Shop.example.com' })).toThrow(
      'Invalid CORS_ORIGINS="https://Shop.example.com": "https://Shop.example.com" is not an origin as browsers send it; write "https://shop.example.com"',
    );
    expect(() => loadConfig({ CORS_ORIGINS: 'https://shop.example.com/' })).toThrow('write "https://shop.example.com"');
    expect(() => loadConfig({ CORS_ORIGINS: 'https://shop.example.com:443' })).toThrow('write "https://shop.example.com"');
    expect(() => loadConfig({ CORS_ORIGINS: 'shop.example.com' })).toThrow('"shop.example.com" is not a web origin');
    expect(() => loadConfig({ CORS_ORIGINS: ',' })).toThrow('must be *, off, or a comma-separated list of origins');
  });

  it('derives the public base URL from the listen address unless given', () => {
    expect(loadConfig({ HOST: '0.0.0.0', PORT: '8080' }).PUBLIC_BASE_URL).toBe('http://localhost:8080/v1');
    expect(loadConfig({ PUBLIC_BASE_URL: 'https://api.example.com/v1' }).PUBLIC_BASE_URL).toBe('https://api.example.com/v1');
  });
});
