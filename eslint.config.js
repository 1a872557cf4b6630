// ESLint: the recommended rules of ESLint and typescript-eslint's type-checked set, on all code
// of the project (the service, its tests, the benchmark and CI scripts). `npm run lint`.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'client/dist/', 'coverage/', 'node_modules/', 'bench/results/'] },
  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: globals.node,
      // The project that type-checks src, test and bench together (npm run typecheck).
      parserOptions: { project: './tsconfig.check.json', tsconfigRootDir: import.meta.dirname },
    },
  },
  {
    rules: {
      // Fastify plugins, hooks and handlers are async by contract, whether or not they await.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    // Modules of one job (CONTRIBUTING.md): a file of the service over 300 lines, or a function over 100,
    // is doing several. Blank lines and comments are not counted: the why of the code costs nothing.
    files: ['src/**/*.ts'],
    rules: {
      'max-lines': ['error', { max: 300, skipBlankLines: true, skipComments: true }],
      'max-lines-per-function': ['error', { max: 100, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    // Tests read whatever JSON came back (response.json() is any), on purpose.
    files: ['test/**/*.ts', 'client/test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  { files: ['**/*.js', '**/*.mjs'], extends: [tseslint.configs.disableTypeChecked] },
  // The browser tests' page script runs in Chromium, not Node.
  { files: ['test/browser/page/**/*.js'], languageOptions: { globals: globals.browser } },
  // Layout is Prettier's (npm run lint checks it): no stylistic rule may disagree with it.
  prettier,
);
