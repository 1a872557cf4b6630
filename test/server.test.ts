import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run, startServer } from './helpers.js';

let dataDir: string;
beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'pets-data-'));
});
afterAll(() => rm(dataDir, { recursive: true, force: true }));

describe('the server process', () => {
  it('refuses a bad setting with one line naming the variable, and a non-zero exit', async () => {
    for (const [name, value] of [
      ['PORT', 'eighty'],
      ['LOG_LEVEL', 'loud'],
      ['PUBLIC_BASE_URL', 'https://api.example.com/v2'],
      ['DATABASE_URL', 'mysql://localhost/pets'],
    ] as const) {
      const { code, stdout, stderr } = await run(['src/server.ts'], { [name]: value });
      expect(code).not.toBe(0);
      expect(stdout).toBe('');
      expect(stderr.trim().split('\n')).toHaveLength(1);
      expect(stderr).toContain(name);
    }
  });

  it('serves the API on the embedded database without any install, keeps data across restarts, and stops cleanly', async () => {
    const first = await startServer({ DATA_DIR: dataDir });
    const created = await fetch(`${first.origin}/v1/pets`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Persisted', categoryId: 1, status: 'available' }),
    });
    expect(created.status).toBe(201);
    const pet = await created.json();
    expect(await first.stop('SIGTERM')).toBe(0);

    const second = await startServer({ DATA_DIR: dataDir });
    const fetched = await fetch(`${second.origin}/v1/pets/${pet.id}`);
    expect(fetched.status).toBe(200);
    expect(await fetched.json()).toEqual(pet);
    expect(await second.stop('SIGINT')).toBe(0);
  });
});
