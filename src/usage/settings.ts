import { Type } from '@sinclair/typebox';
import { SettingNeedsError } from '../platform/config/errors.js';
import type { SettingValues } from '../platform/config/parsers.js';

// The usage record's settings, each description the setting's documentation (src/config/schema.ts), and their parser.

/** How long the usage record (docs/admin-api.md, "Usage") is kept, and whether it is sent to billing as usage.hourly events. */
export const usage = {
  USAGE_RETENTION_DAYS: Type.Integer({
    minimum: 0,
    default: 400,
    description:
      'Days the usage record keeps each hour of usage (`GET /admin/v1/usage`); older hours are deleted by the instances. ' +
      '`0` keeps no usage record at all: nothing is recorded, and the hours recorded before are deleted.',
  }),
  USAGE_EXPORT: Type.Union([Type.Literal('off'), Type.Literal('hourly')], {
    default: 'off',
    description:
      '`hourly`: each closed hour of the usage record is sent to `WEBHOOK_URL` (which it needs) as `usage.hourly` events, one per ' +
      'customer (or key without a customer) and operation that had traffic, once across all instances, again with a higher ' +
      '`revision` when a late write changes an hour sent (docs/admin-api.md, "Usage events"; docs/billing-meters.md); ' +
      '`POST /admin/v1/usage/exports` sends a range again. The hours before it was first turned on are sent only by that backfill.',
  }),
  USAGE_EXPORT_DELAY_SECONDS: Type.Integer({
    minimum: 0,
    maximum: 86_400,
    default: 300,
    description:
      'With `USAGE_EXPORT=hourly`: an hour is sent this long after it closes, so that the instances have written its last ' +
      'counts (each writes every second; one cut off longer sends a revision when it catches up).',
  }),
  USAGE_EXPORT_SOURCE: Type.String({
    pattern: '^\\S+$',
    default: 'pet-store',
    examples: ['/pet-store/production'],
    description:
      "With `USAGE_EXPORT=hourly`: the events' CloudEvents `source`, a URI-reference naming this deployment (the API's URL " +
      'will do); a meter that drops duplicates by `source` and `id` (OpenMeter) tells two deployments apart by it.',
  }),
};

/** USAGE_EXPORT's settings; undefined when it is off. */
export interface UsageExportSettings {
  /** How long after an hour closes it is sent. */
  delayMs: number;
  /** The events' CloudEvents source. */
  source: string;
}

/** The export of the usage record as usage.hourly events: undefined when USAGE_EXPORT is off; it needs WEBHOOK_URL. */
export function usageExportSettings(settings: SettingValues<typeof usage> & { WEBHOOK_URL?: string }): UsageExportSettings | undefined {
  if (settings.USAGE_EXPORT === 'off') return undefined;
  if (settings.WEBHOOK_URL === undefined) {
    throw new SettingNeedsError(
      'USAGE_EXPORT=hourly',
      'WEBHOOK_URL',
      'the usage.hourly events are sent there, as the other usage events are',
    );
  }
  return { delayMs: settings.USAGE_EXPORT_DELAY_SECONDS * 1000, source: settings.USAGE_EXPORT_SOURCE };
}
