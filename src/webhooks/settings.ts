import { Type } from '@sinclair/typebox';
import { invalidSetting, SettingsTogetherError } from '../platform/config/errors.js';
import { percentagesOf, type SettingValues } from '../platform/config/parsers.js';

// The WEBHOOK_* settings, each description the setting's documentation (src/config/schema.ts), and their parser.

/** Usage events: where they go, how they are signed, when they are sent, how long they are kept. */
export const webhooks = {
  WEBHOOK_URL: Type.Optional(
    Type.String({
      pattern: '^https?://[^/\\s]+(/\\S*)?$',
      examples: ['https://billing.example.com/hooks/pet-store'],
      description:
        'Where usage events are POSTed (`usage.threshold`, `key.banned`, `credits.refilled`, `credits.low`, `credits.exhausted`; `usage.hourly` with `USAGE_EXPORT`), signed with `WEBHOOK_SECRET`; unset, none are recorded or sent (docs/admin-api.md, "Usage events"). ' +
        'A user and password in it (`https://user:password@host/path`, %-escaped) are sent as HTTP Basic authentication, never in the URL, and never shown.',
    }),
  ),
  WEBHOOK_SECRET: Type.Optional(
    Type.String({
      minLength: 32,
      description:
        "The secret the `Pet-Store-Signature` header's HMAC-SHA256 is keyed with: at least 32 characters, required with `WEBHOOK_URL`. Never logged.",
    }),
  ),
  WEBHOOK_USAGE_THRESHOLDS: Type.String({
    default: '80,100',
    pattern: '^[0-9]+(,[0-9]+)*$',
    examples: ['50,80,100'],
    description: "Percentages of a key's window (1 to 100, ascending): crossing each sends one `usage.threshold` event per window.",
  }),
  CREDITS_LOW_THRESHOLDS: Type.String({
    default: '20',
    pattern: '^[0-9]+(,[0-9]+)*$',
    examples: ['20,50'],
    description:
      "Percentages of a balance of prepaid credits' amount (what it was last set, refilled or decremented to, moved by increments; 1 to 100, ascending): " +
      'its remaining falling below each sends one `credits.low` event per balance until it is set, refilled or decremented again; with `WEBHOOK_URL`.',
  }),
  WEBHOOK_RETENTION_DAYS: Type.Integer({
    minimum: 1,
    default: 30,
    description:
      'Delivered and failed usage events are deleted this many days after they were recorded (pending ones are kept, however old); with `WEBHOOK_URL`.',
  }),
};

export interface WebhookSettings {
  /** WEBHOOK_URL without its user and password. */
  url: string;
  /** The Authorization header's value when WEBHOOK_URL holds a user or password: Basic with both. */
  authorization: string | undefined;
  secret: string;
  /** WEBHOOK_USAGE_THRESHOLDS: percentages, ascending. */
  usageThresholds: number[];
  /** CREDITS_LOW_THRESHOLDS: percentages, ascending. */
  creditsLowThresholds: number[];
}

/** The WEBHOOK_* settings: where and how usage events are sent; undefined without WEBHOOK_URL. */
export function webhookSettings(settings: SettingValues<typeof webhooks>): WebhookSettings | undefined {
  if ((settings.WEBHOOK_URL === undefined) !== (settings.WEBHOOK_SECRET === undefined)) {
    throw new SettingsTogetherError(
      'WEBHOOK_URL and WEBHOOK_SECRET',
      'the receiver checks every event against the secret (at least 32 characters)',
    );
  }
  // The pattern takes `https://exa[mple.com`, which fetch would refuse at every attempt.
  if (settings.WEBHOOK_URL !== undefined && !URL.canParse(settings.WEBHOOK_URL))
    throw invalidSetting('WEBHOOK_URL', settings.WEBHOOK_URL, 'not a URL');
  const usageThresholds = percentagesOf('WEBHOOK_USAGE_THRESHOLDS', settings.WEBHOOK_USAGE_THRESHOLDS);
  const creditsLowThresholds = percentagesOf('CREDITS_LOW_THRESHOLDS', settings.CREDITS_LOW_THRESHOLDS);
  if (!settings.WEBHOOK_URL) return undefined;
  return { ...webhookTarget(settings.WEBHOOK_URL), secret: settings.WEBHOOK_SECRET!, usageThresholds, creditsLowThresholds };
}

/**
 * WEBHOOK_URL's user and password as Basic authentication, and the URL without them: fetch refuses a URL that holds
 * them, with an error quoting it whole, which each attempt would record and log.
 */
function webhookTarget(written: string): Pick<WebhookSettings, 'url' | 'authorization'> {
  const url = new URL(written);
  if (!url.username && !url.password) return { url: url.href, authorization: undefined };
  let credentials: string;
  try {
    credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
  } catch {
    throw invalidSetting('WEBHOOK_URL', written, 'its user or password holds a % that starts no %-escape');
  }
  url.username = '';
  url.password = '';
  return { url: url.href, authorization: `Basic ${Buffer.from(credentials).toString('base64')}` };
}
