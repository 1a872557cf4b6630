import { COMMAND, idArgument, type KeysCommand } from './command.js';

/** Revokes a key, and the keys rotated into it that still work, on every instance, as the admin API's revokeKey does. */
export const revoke: KeysCommand = {
  name: 'revoke',
  synopsis: 'keys revoke <id>',
  options: {},
  parse(_values, positionals) {
    const id = idArgument('revoke', 'key', positionals);
    return async ({ rules }, { out, err }) => {
      if (!(await rules.revoke(id, { actor: COMMAND }))) {
        err(`keys: no API key with id ${id}`);
        return 1;
      }
      out(`Revoked API key ${id}, with any key rotated into it still in its overlap; they stop working on every instance within a second.`);
      return 0;
    };
  },
};
