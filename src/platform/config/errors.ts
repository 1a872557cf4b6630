import { DOMAIN_CODES, domainError } from '../domain-errors.js';

// What stops a process before it serves: a setting of the environment that is missing or wrong. Each
// has the one code DOMAIN_CODES.config (server.ts prints its message and exits) and a template by kind.

/** A setting whose value is wrong; the setting is named with its value shown (invalidSetting) or alone. */
export const InvalidSettingError = domainError(DOMAIN_CODES.config, 'Invalid %s: %s');

/** Two settings of which one is set without the other. */
export const SettingsTogetherError = domainError(DOMAIN_CODES.config, '%s go together: %s');

/** A setting that needs another which is not set. */
export const SettingNeedsError = domainError(DOMAIN_CODES.config, '%s needs %s: %s');

/** Settings of which at most one may be set. */
export const ExclusiveSettingsError = domainError(DOMAIN_CODES.config, 'Set one of %s, not both: %s');

/** No DATABASE_URL where the embedded database was left out of the install (src/platform/db/open.ts). */
export const NoEmbeddedDatabaseError = domainError(
  DOMAIN_CODES.config,
  'DATABASE_URL is not set, and this install has no embedded database (@electric-sql/pglite, an optional dependency, ' +
    'is left out of the container image): set DATABASE_URL to a PostgreSQL database.',
);

/** A setting's value in an error: quoted, with any password in it masked (the line goes to logs). */
export const invalidSetting = (name: string, value: string, why: string) =>
  new InvalidSettingError(`${name}=${/_(SECRET|PASSWORD)$/.test(name) ? '***' : JSON.stringify(redactPasswords(value))}`, why);

/** `scheme:` and what follows it up to its URL's last `@` (an unescaped password may hold one), not into the next URL of a list. */
const UP_TO_USERINFO_END = /([a-z][a-z0-9+.-]*:)((?:(?!:\/\/).)*)@/gi;

/**
 * The text with the password of every `scheme://user:password@` masked, and every `password=` query parameter's. A URL
 * of another shape (`redis:/user:password@host`, one slash: no URL, and no telling where its password is) has all
 * between its `scheme:` and its last `@` masked; `scheme://user@` has no password to mask.
 */
export function redactPasswords(text: string): string {
  return text
    .replace(UP_TO_USERINFO_END, (whole, scheme: string, userinfo: string) => {
      if (/^\/\/[^:@/\s]*$/.test(userinfo)) return whole;
      const user = /^\/\/[^:@/\s]*(?=:)/.exec(userinfo)?.[0] ?? '';
      return `${scheme}${user && `${user}:`}***@`;
    })
    .replace(/([?&]password=)[^&#\s]*/gi, '$1***');
}
