import { DEFAULT_OVERLAP_SECONDS } from '../../api-keys/lifecycle.js';
import { RotateKey } from '../../api-keys/admin-schemas.js';
import { COMMAND, expiryOf, idArgument, optionsOf, validated, type KeysCommand } from './command.js';

/** Replaces a key with a new one, taking what the admin API's rotateKey takes; the new key is the last line of stdout. */
export const rotate: KeysCommand = {
  name: 'rotate',
  synopsis: 'keys rotate <id> [--overlap-seconds N] [--expires-at ISO-8601]',
  options: optionsOf(RotateKey),
  parse(values, positionals) {
    const id = idArgument('rotate', 'key', positionals);
    const { overlapSeconds = DEFAULT_OVERLAP_SECONDS, expiresAt } = validated(RotateKey, values);
    const expiry = expiryOf(expiresAt);
    return async ({ rules }, { out, err }) => {
      const rotated = await rules.rotate(id, { overlapSeconds, expiresAt: expiry }, { actor: COMMAND });
      if (!rotated) {
        err(`keys: no API key with id ${id}`);
        return 1;
      }
      const until = overlapSeconds === 0 ? 'it was revoked at once' : `it keeps working for ${overlapSeconds} s`;
      out(
        `Rotated API key ${id} into key ${rotated.id} (same plan, limits, name, scope and quota); ${until}. The new key is shown only this once:`,
      );
      out(rotated.key);
      return 0;
    };
  },
};
