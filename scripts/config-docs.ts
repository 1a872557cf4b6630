// Writes the settings table of docs/configuration.md and the whole of .env.example from the
// configuration schema, whose descriptions are the settings' documentation. `npm run docs:config`;
// test/platform/config.test.ts fails when the committed files differ from what this writes.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { TSchema } from '@sinclair/typebox';
import { ConfigSchema } from '../src/config/schema.js';

export const DOCS_COMMAND = 'npm run docs:config';

const ROOT = new URL('../', import.meta.url);
const TABLE_START = `<!-- The settings table is generated from the schema in src/config/schema.ts by \`${DOCS_COMMAND}\`: edit the schema, not the table. -->`;
const TABLE_END = '<!-- End of the generated settings table. -->';

const settings = Object.entries(ConfigSchema.properties as Record<string, TSchema>);

/** A value's unit, from the setting's name, and the value in a larger unit when it is a round one. */
const UNITS: Array<{ suffix: string; unit: string; larger: Array<[number, string]> }> = [
  { suffix: '_MS', unit: 'ms', larger: [[1000, 's']] },
  { suffix: '_SECONDS', unit: 's', larger: [[60, 'min']] },
  { suffix: '_HOURS', unit: 'h', larger: [] },
  { suffix: '_BYTES', unit: 'bytes', larger: [[1024 * 1024, 'MiB']] },
];
const unitOf = (name: string) => UNITS.find(({ suffix }) => name.endsWith(suffix));

const code = (value: unknown) => `\`${String(value)}\``;

function defaultOf(name: string, schema: TSchema): string {
  const value: unknown = schema.default;
  if (value === undefined) return 'unset';
  if (value === '') return 'empty';
  const larger = typeof value === 'number' ? unitOf(name)?.larger.find(([size]) => value >= size && value % size === 0) : undefined;
  return larger ? `${code(value)} (${Number(value) / larger[0]} ${larger[1]})` : code(value);
}

/** What the schema accepts, in words. */
function valuesOf(name: string, schema: TSchema): string {
  if (schema.type === 'boolean') return '`true`, `false`';
  if (schema.anyOf) return (schema.anyOf as TSchema[]).map((option) => code(option.const)).join(', ');
  if (schema.type === 'integer' || schema.type === 'number') {
    const { minimum, maximum } = schema as { minimum?: number; maximum?: number };
    const range = maximum === undefined ? `${minimum} or more` : `${minimum} to ${maximum}`;
    if (schema.type === 'number') return `${range}, a decimal`;
    const unit = unitOf(name)?.unit;
    return unit ? `${range} (${unit})` : range;
  }
  const examples = schema.examples as string[] | undefined;
  if (examples) return `e.g. ${examples.map(code).join(', ')}`;
  // A regular expression tells a reader little: a pattern is shown by examples of what it accepts.
  if (schema.pattern) throw new Error(`${name}: a setting with a pattern needs examples of what it accepts`);
  return 'text';
}

function descriptionOf(name: string, schema: TSchema): string {
  if (!schema.description) throw new Error(`${name}: every setting needs a description, its documentation`);
  return schema.description;
}

/** The table of every setting, in the schema's order. */
export function settingsTable(): string {
  const rows = settings.map(([name, schema]) =>
    [code(name), defaultOf(name, schema), valuesOf(name, schema), descriptionOf(name, schema)].map((cell) => cell.replaceAll('|', '\\|')),
  );
  return ['| Setting | Default | Values | Meaning |', '|---|---|---|---|', ...rows.map((row) => `| ${row.join(' | ')} |`)].join('\n');
}

/** The page with its generated section replaced; the rest of it is written by hand. */
export function configurationPage(page: string): string {
  const start = page.indexOf(TABLE_START);
  const end = page.indexOf(TABLE_END);
  if (start < 0 || end < start)
    throw new Error(`docs/configuration.md has lost the comments around its settings table:\n${TABLE_START}\n${TABLE_END}`);
  return `${page.slice(0, start)}${TABLE_START}\n\n${settingsTable()}\n\n${page.slice(end)}`;
}

/** Markdown as plain text for a comment: links become their text, code loses its backticks. */
const plain = (markdown: string) => markdown.replace(/\[([^\]]+)\]\([^)]+\)/g, '$1').replaceAll('`', '');

/** `# `-comment lines of at most 100 characters. */
function comment(text: string): string[] {
  const lines: string[] = [];
  for (const word of text.split(' ')) {
    const last = lines.at(-1);
    if (last !== undefined && last.length + 1 + word.length <= 100) lines[lines.length - 1] = `${last} ${word}`;
    else lines.push(`# ${word}`);
  }
  return lines;
}

const ENV_HEADER = [
  '# The settings the service reads from its environment, each optional, with its default (empty: unset).',
  `# Generated from the schema in src/config/schema.ts by \`${DOCS_COMMAND}\`: edit the schema, not this file.`,
  '# docs/configuration.md has them as a table; docker compose reads a .env file.',
];

/** Every setting with its default (empty when unset), each under its description and the values it takes. */
export function envExample(): string {
  const entries = settings.map(([name, schema]) => {
    const values = valuesOf(name, schema);
    return [
      ...comment(plain(descriptionOf(name, schema))),
      ...(values === 'text' ? [] : [`# Values: ${plain(values)}`]),
      `${name}=${schema.default === undefined ? '' : String(schema.default)}`,
    ].join('\n');
  });
  return `${[ENV_HEADER.join('\n'), ...entries].join('\n\n')}\n`;
}

/** The files this writes, with what they should hold. */
export const generatedFiles = () => [
  { path: 'docs/configuration.md', text: configurationPage(readFileSync(new URL('docs/configuration.md', ROOT), 'utf8')) },
  { path: '.env.example', text: envExample() },
];

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const { path, text } of generatedFiles()) {
    writeFileSync(new URL(path, ROOT), text);
    console.log(`wrote ${path}`);
  }
}
