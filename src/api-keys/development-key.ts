import type { FastifyInstance } from 'fastify';
import type { Actor } from '../audit/repository.js';

/** The audit trail's name for this start-up step, which issues a key with no operator or token. */
const DEVELOPMENT_KEY: Actor = { name: 'system:development-key', adminTokenId: null };

/**
 * On an embedded database with no keys at all (a newcomer's first `npm start`), issues one
 * development key and returns the lines that show it, once, with a request to paste. Returns
 * nothing on PostgreSQL, where keys are issued by an operator with the keys command.
 */
export async function developmentKeyGreeting(app: FastifyInstance): Promise<string | undefined> {
  if (app.db.kind !== 'pglite' || (await app.apiKeysRepository.list()).length > 0) return undefined;
  const { id, key } = await app.keyRules.create({ plan: 'business', name: 'development' }, { actor: DEVELOPMENT_KEY });
  const base = app.config.PUBLIC_BASE_URL;
  return [
    '',
    `No API keys yet, so this is a development key (id ${id}, business plan). It is shown only this once:`,
    '',
    `  ${key}`,
    '',
    'Try it:',
    '',
    `  curl -H 'Authorization: Bearer ${key}' ${base}/pets`,
    '',
    'More keys: npm run --silent keys -- create --plan free (see docs/api-keys.md).',
    '',
  ].join('\n');
}
