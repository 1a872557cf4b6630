import type { ApiKeyRecord } from '../../api-keys/repository.js';
import { noArguments, type KeysCommand } from './command.js';

/** The key's state as the admin API gives it, with when it was revoked and which key replaced it. */
function stateOf(key: ApiKeyRecord): string {
  const state = key.state === 'revoked' ? `revoked ${key.revokedAt}` : key.state;
  return key.replacedBy === null ? state : `${state}, replaced by ${key.replacedBy}`;
}

/** Lists the keys, one tab-separated line each, or as the JSON array of the admin API's records; never a key or its hash. */
export const list: KeysCommand = {
  name: 'list',
  synopsis: 'keys list [--json]',
  options: { json: { type: 'boolean' } },
  parse(values, positionals) {
    noArguments(positionals);
    return async ({ keys }, { out }) => {
      const records = await keys.list();
      if (values.json) {
        out(JSON.stringify(records, null, 2));
        return 0;
      }
      for (const key of records) {
        out(
          [
            key.id,
            key.name || '-',
            key.plan,
            // Its windows named minute and day (its own, else its plan's); the JSON has every window (`limits`: its own).
            key.perMinute === null ? '-' : `${key.perMinute}/minute`,
            key.perDay === null ? '-' : `${key.perDay}/day`,
            key.readOnly ? 'read-only' : 'read-write',
            key.createdAt,
            key.expiresAt ? `expires ${key.expiresAt}` : 'no expiry',
            stateOf(key),
          ].join('\t'),
        );
      }
      return 0;
    };
  },
};
