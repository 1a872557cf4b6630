import { newKey } from '../../api-keys/rules.js';
import { NewAdminKey } from '../../api-keys/admin-schemas.js';
import { COMMAND, noArguments, optionsOf, sharedRule, validated, type KeysCommand } from './command.js';

/** Issues an API key, taking what the admin API's createKey takes; the key is the last line of stdout. */
export const create: KeysCommand = {
  name: 'create',
  synopsis:
    'keys create --plan PLAN [--name TEXT] [--per-minute N] [--per-day N] [--expires-at ISO-8601] [--read-only] [--customer ID] [--allowed-origin ORIGIN]...',
  options: optionsOf(NewAdminKey),
  parse(values, positionals) {
    noArguments(positionals);
    const key = sharedRule(() => newKey(validated(NewAdminKey, values), Date.now()));
    return async ({ rules }, { out }) => {
      const { id, key: secret } = await rules.create(key, { actor: COMMAND });
      out(`Created API key ${id} (${key.plan}). It is shown only this once; store it now:`);
      out(secret);
      return 0;
    };
  },
};
