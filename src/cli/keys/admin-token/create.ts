import { ADMIN_SCOPES, isAdminScope } from '../../../admin/tokens-repository.js';
import { AdminTokenName } from '../../../admin/token-name.js';
import { checked, COMMAND, noArguments, UsageError, type KeysCommand } from '../command.js';

/** Issues an admin token; the token is the last line of stdout. Only this command makes them. */
export const createAdminToken: KeysCommand = {
  name: 'admin-token create',
  synopsis: 'keys admin-token create --scope <read|write> --name TEXT',
  options: { scope: { type: 'string' }, name: { type: 'string' } },
  parse({ scope, name }, positionals) {
    noArguments(positionals);
    if (typeof scope !== 'string' || !isAdminScope(scope)) throw new UsageError(`--scope must be one of ${ADMIN_SCOPES.join(', ')}`);
    if (typeof name !== 'string' || !name) throw new UsageError('--name is required: who or what holds the token');
    const tokenName = checked('--name', AdminTokenName, name);
    return async ({ tokens }, { out }) => {
      const { id, token } = await tokens.create({ name: tokenName, scope }, COMMAND);
      out(`Created admin token ${id} (${scope}). It is shown only this once; store it now:`);
      out(token);
      return 0;
    };
  },
};
