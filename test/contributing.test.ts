import { existsSync, readFileSync } from 'node:fs';
import { expect, test } from 'vitest';

/**
 * CONTRIBUTING.md is the map of the code: a path it names that no longer exists sends the next
 * engineer looking for a folder that moved. Paths are named from the repository's root (`src/...`,
 * `test/...`, `.ci/...`) or, in backticks, from `src/` (`v1/pipeline.ts`).
 */
function namedPaths(text: string): string[] {
  const fromRoot = /(?<![\w./-])(?:src|test|client|bench|scripts|migrations|deploy|docs|\.ci)\/[\w./-]*[\w/]/g;
  const quoted = /`([\w.-]+(?:\/[\w.-]+)+\/?)`/g;
  const paths = new Set([...text.matchAll(fromRoot)].map(([path]) => path));
  for (const [, path] of text.matchAll(quoted)) paths.add(path!);
  return [...paths].sort();
}

test('every path CONTRIBUTING.md names exists, from the root or from src/', () => {
  const paths = namedPaths(readFileSync('CONTRIBUTING.md', 'utf8'));
  expect(paths.length).toBeGreaterThan(50);
  expect(paths.filter((path) => !existsSync(path) && !existsSync(`src/${path}`))).toEqual([]);
});

test('a path that does not exist is caught', () => {
  expect(namedPaths('see `src/schemas/` and test/nowhere.test.ts, not `npm run x`')).toEqual(['src/schemas/', 'test/nowhere.test.ts']);
});
