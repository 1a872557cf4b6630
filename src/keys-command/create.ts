import { ownLimits } from '../api-keys/plans.js';
import { NewAdminKey } from '../admin/schemas.js';
import { COMMAND, expiryOf, noArguments, optionsOf, sharedRule, validated, type KeysCommand } from './command.js';

/** Issues an API key, taking what the admin API's createKey takes; the key is the last line of stdout. */
export const create: KeysCommand = {
  name: 'create',
  synopsis:
    'keys create --plan <free|pro|business|enterprise> [--name TEXT] [--per-minute N] [--per-day N] [--expires-at ISO-8601] [--read-only]',
  options: optionsOf(NewAdminKey),
  parse(values, positionals) {
    noArguments(positionals);
    const { plan, name, perMinute, perDay, expiresAt, readOnly } = validated(NewAdminKey, values);
    const key = { plan, name, limits: sharedRule(() => ownLimits(plan, perMinute, perDay)), expiresAt: expiryOf(expiresAt), readOnly };
    return async ({ keys }, { out }) => {
      const { id, key: secret } = await keys.create(key, { actor: COMMAND });
      out(`Created API key ${id} (${plan}). It is shown only this once; store it now:`);
      out(secret);
      return 0;
    };
  },
};
