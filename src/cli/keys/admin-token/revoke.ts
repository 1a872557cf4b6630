import { COMMAND, idArgument, type KeysCommand } from '../command.js';

/** Revokes an admin token: the admin API refuses it from the next request on. */
export const revokeAdminToken: KeysCommand = {
  name: 'admin-token revoke',
  synopsis: 'keys admin-token revoke <id>',
  options: {},
  parse(_values, positionals) {
    const id = idArgument('admin-token revoke', 'token', positionals);
    return async ({ tokens }, { out, err }) => {
      if (!(await tokens.revoke(id, COMMAND))) {
        err(`keys: no admin token with id ${id}`);
        return 1;
      }
      out(`Revoked admin token ${id}; the admin API refuses it from now on.`);
      return 0;
    };
  },
};
