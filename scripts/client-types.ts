// Writes client/src/generated/openapi.ts, the client's types, from the OpenAPI document the service
// serves: the app is built as the server builds it (embedded database, in memory, default settings)
// and asked for /v1/openapi.json without listening. `npm run client:types`; the client's tests fail
// when the committed file differs from what this writes.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString, COMMENT_HEADER, type OpenAPI3 } from 'openapi-typescript';
import { format, resolveConfig } from 'prettier';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config/load.js';

export const CLIENT_TYPES_COMMAND = 'npm run client:types';
export const CLIENT_TYPES_FILE = 'client/src/generated/openapi.ts';

const ROOT = new URL('../', import.meta.url);

/** The document /v1/openapi.json serves with every setting at its default, whatever the environment says. */
export async function servedDocument(): Promise<OpenAPI3> {
  const app = await buildApp(loadConfig({ DATA_DIR: 'memory://', LOG_LEVEL: 'silent' }));
  try {
    const response = await app.inject({ url: '/v1/openapi.json' });
    if (response.statusCode !== 200) throw new Error(`GET /v1/openapi.json answered ${response.statusCode}: ${response.body}`);
    return response.json<OpenAPI3>();
  } finally {
    await app.close();
  }
}

/** The file's text: openapi-typescript's types of the document, as Prettier lays them out. */
export async function clientTypes(): Promise<string> {
  const header =
    `${COMMENT_HEADER}` +
    `// From the OpenAPI document the service serves at /v1/openapi.json, by \`${CLIENT_TYPES_COMMAND}\` (scripts/client-types.ts).\n\n`;
  const types = astToString(await openapiTS(await servedDocument(), { silent: true }));
  const path = fileURLToPath(new URL(CLIENT_TYPES_FILE, ROOT));
  return format(header + types, { ...(await resolveConfig(path)), filepath: path });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(new URL(CLIENT_TYPES_FILE, ROOT), await clientTypes());
  console.log(`wrote ${CLIENT_TYPES_FILE}`);
}
