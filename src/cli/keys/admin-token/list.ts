import { noArguments, type KeysCommand } from '../command.js';

/** Lists the admin tokens, one tab-separated line each or as JSON; never a token or its hash. */
export const listAdminTokens: KeysCommand = {
  name: 'admin-token list',
  synopsis: 'keys admin-token list [--json]',
  options: { json: { type: 'boolean' } },
  parse(values, positionals) {
    noArguments(positionals);
    return async ({ tokens }, { out }) => {
      const records = await tokens.list();
      if (values.json) {
        out(JSON.stringify(records, null, 2));
        return 0;
      }
      for (const token of records) {
        out([token.id, token.name, token.scope, token.createdAt, token.revokedAt ? `revoked ${token.revokedAt}` : 'active'].join('\t'));
      }
      return 0;
    };
  },
};
