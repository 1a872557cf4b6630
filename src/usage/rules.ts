import { randomUUID } from 'node:crypto';
import { recordAudit, type Actor, type ChangeOptions } from '../audit/repository.js';
import { atomically, type Database } from '../platform/db/database.js';
import { HOUR_MS } from '../platform/time.js';
import { usageExports } from './export-repository.js';
import type { RecordExportedHours } from './exporter.js';

/** A range of whole hours to send again: every customer's and key's, or one customer's. */
export interface ExportRange {
  start: Date;
  end: Date;
  customerId?: number | undefined;
}

/**
 * The backfill of usage.hourly events, with its audit entry, in one transaction: the caller's (Idempotency-Key), or one
 * of its own. It waits for an instance's pass to end, so that the two never decide an hour's revision at once.
 */
export function createUsageExportRules(db: Database, exported: RecordExportedHours) {
  return {
    /**
     * Sums every hour of the range with usage and sends each again, with its stable id: at its revision when its totals
     * are those sent last, at the next when they changed (an hour not over yet: its totals so far). How many events.
     */
    async resend({ start, end, customerId }: ExportRange, { tx, actor }: Pick<ChangeOptions, 'tx'> & { actor: Actor }): Promise<number> {
      return atomically(db, tx, async (target) => {
        await usageExports.lock(target);
        const sendId = randomUUID();
        let events = 0;
        // An hour at a time, so that a month of many customers is never all in memory at once.
        for (let hour = start.getTime(); hour < end.getTime(); hour += HOUR_MS) {
          const hours = await usageExports.exportRange(new Date(hour), new Date(hour + HOUR_MS), customerId, target);
          if (hours.length > 0) await exported(target, hours, sendId);
          events += hours.length;
        }
        const details = { start: start.toISOString(), end: end.toISOString(), customerId: customerId ?? null, events };
        await recordAudit(target, actor, 'usage.export', null, details);
        return events;
      });
    },
  };
}
