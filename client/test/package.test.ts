// The package as it ships: types current with the served document, and dist/ as a consumer gets it
// (ESM with declarations, nothing imported but its own modules), packed by npm and installed.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLIENT_TYPES_COMMAND, CLIENT_TYPES_FILE, clientTypes } from '../../scripts/client-types.js';
import { ROOT, runCommand } from '../../harness/processes.js';
import { VERSION } from '../src/index.js';

const packageJson = JSON.parse(readFileSync(join(ROOT, 'client/package.json'), 'utf8')) as {
  name: string;
  version: string;
  type: string;
  exports: { '.': { types: string; default: string } };
  dependencies?: object;
};
const tsc = (args: string[]) => runCommand(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), ...args]);

it(`${CLIENT_TYPES_FILE} is what the served document generates`, async () => {
  expect(
    readFileSync(join(ROOT, CLIENT_TYPES_FILE), 'utf8'),
    `${CLIENT_TYPES_FILE} differs from /v1/openapi.json: run ${CLIENT_TYPES_COMMAND}`,
  ).toBe(await clientTypes());
});

describe('the built package', () => {
  const consumerDir = join(ROOT, 'node_modules/.cache');
  let consumer: string;
  beforeAll(async () => {
    const built = await tsc(['-p', 'client/tsconfig.json']);
    expect(built.code, built.stdout + built.stderr).toBe(0);
    mkdirSync(consumerDir, { recursive: true });
    consumer = mkdtempSync(join(consumerDir, 'client-consumer-'));
  });
  afterAll(() => rmSync(consumer, { recursive: true, force: true }));

  it('is an ESM workspace of this repository with no dependency, its exports naming the build and its declarations', () => {
    expect(packageJson).toMatchObject({
      name: '@pet-store/client',
      type: 'module',
      exports: { '.': { types: './dist/index.d.ts', default: './dist/index.js' } },
    });
    expect(packageJson.dependencies).toBeUndefined();
    expect(VERSION).toBe(packageJson.version);
    expect(Object.keys(packageJson.exports['.'])[0]).toBe('types');
  });

  it('imports nothing but its own modules: no node: module, so it runs in browsers as in Node', () => {
    const dist = join(ROOT, 'client/dist');
    const modules = readdirSync(dist, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.js'));
    expect(modules).toContain('index.js');
    for (const module of modules) {
      const text = readFileSync(join(dist, module), 'utf8');
      const specifiers = [
        ...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s*['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]/g),
      ].map((match) => match[1] ?? match[2]);
      expect(
        specifiers.filter((specifier) => !specifier!.startsWith('./')),
        module,
      ).toEqual([]);
      expect(text, module).not.toMatch(/\brequire\(/);
    }
  });

  it('packs the client and its types, no test and nothing of the server; its README links resolve where it is installed', async () => {
    const packed = await runCommand('npm', ['pack', '--workspace=client', '--ignore-scripts', '--json', '--pack-destination', consumer]);
    expect(packed.code, packed.stderr).toBe(0);
    const [{ filename, files }] = JSON.parse(packed.stdout) as [{ filename: string; files: Array<{ path: string }> }];
    const paths = files.map((file) => file.path).sort();
    expect(paths).toEqual(expect.arrayContaining(['README.md', 'package.json', 'dist/index.js', 'dist/index.d.ts', 'dist/client.d.ts']));
    const stray = paths.filter((path) => !/^(README\.md|package\.json|(dist|src)\/[\w./-]+\.(js|ts|map))$/.test(path));
    expect(stray, 'only the client, built and as source').toEqual([]);
    expect(paths.filter((path) => /test|fastify|routes|plugins|\bdb\b/i.test(path))).toEqual([]);
    const clientSources = readdirSync(join(ROOT, 'client/src'), { recursive: true, encoding: 'utf8' }).filter((file) =>
      file.endsWith('.ts'),
    );
    expect(paths.filter((path) => path.startsWith('src/'))).toEqual(clientSources.map((file) => `src/${file}`).sort());

    // Installed as npm installs it: the consumer below resolves @pet-store/client to this copy.
    const installed = join(consumer, 'node_modules/@pet-store/client');
    mkdirSync(installed, { recursive: true });
    const extracted = await runCommand('tar', ['-xzf', join(consumer, filename), '-C', installed, '--strip-components=1']);
    expect(extracted.code, extracted.stderr).toBe(0);
    const readme = readFileSync(join(installed, 'README.md'), 'utf8');
    const links = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]!);
    for (const link of links) {
      if (/^https?:\/\//.test(link) || link.startsWith('#')) continue;
      expect(existsSync(join(installed, link.split('#')[0]!)), `README link ${link} in the installed package`).toBe(true);
    }
  });

  it('is what `import ... from "@pet-store/client"` gives Node, with types that check a consumer and the README\'s examples', async () => {
    const loaded = await runCommand(process.execPath, [
      '--input-type=module',
      '-e',
      "const m = await import('@pet-store/client'); console.log(Object.keys(m).sort().join(' '))",
    ]);
    expect(loaded.stdout.trim(), loaded.stderr).toBe(
      'AuthenticationError BadRequestError ConflictError ConnectionError NotFoundError PermissionDeniedError PetStoreClient PetStoreError RateLimitError ServerError TimeoutError VERSION',
    );

    writeFileSync(join(consumer, 'package.json'), JSON.stringify({ type: 'module' }));
    writeFileSync(
      join(consumer, 'consumer.ts'),
      [
        "import { PetStoreClient, PetStoreError, type DeprecationNotice, type Pet } from '@pet-store/client';",
        "const client = new PetStoreClient({ baseUrl: 'https://pets.example.com/v1', apiKey: 'psk_x', cache: true, onDeprecation: (n: DeprecationNotice) => n.sunset });",
        "const page: Pet[] = await client.listPets({ status: 'available', limit: 10 });",
        'for await (const pet of client.allPets({ signal: AbortSignal.timeout(1) })) pet.id satisfies number;',
        "const created: Pet = await client.createPet({ name: 'Rex', categoryId: 1 }, { idempotencyKey: 'k' });",
        'const limit: Date | undefined = client.rateLimit?.reset;',
        'const failure = new PetStoreError({ status: 404, code: "not_found", message: "x" });',
        'export const used = [page, created, limit, failure.requestId, failure.retryAfter];',
        '// @ts-expect-error a status the API does not know',
        "await client.listPets({ status: 'lost' });",
        '// @ts-expect-error categoryId is required',
        "await client.createPet({ name: 'Rex' });",
      ].join('\n'),
    );
    // The TypeScript examples of the README, each a module of the consumer's.
    const examples = [...readFileSync(join(ROOT, 'client/README.md'), 'utf8').matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((match, index) => {
      writeFileSync(join(consumer, `readme-${index}.ts`), match[1]!);
      return `readme-${index}.ts`;
    });
    expect(examples.length).toBeGreaterThan(0);
    // A consumer's project: strict, Node's module resolution (exports), browser types only.
    const compilerOptions = {
      strict: true,
      noEmit: true,
      target: 'es2023',
      module: 'nodenext',
      lib: ['es2023', 'dom', 'dom.iterable'],
      types: [],
    };
    writeFileSync(join(consumer, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['consumer.ts', ...examples] }));
    const checked = await tsc(['-p', consumer]);
    expect(checked.code, checked.stdout + checked.stderr).toBe(0);
  });
});
