import { positionOf } from './pages.js';
import type { UsagePosition, UsageQuery, UsageRepository, UsageRow } from './repository.js';

/** The CSV columns after start and the group, in order: a row's counts, the refused kinds each a column of its own. */
export const CSV_COUNTS = ['requests', 'units', 'refusedRateLimited', 'refusedConcurrency', 'refusedCredits', 'refusedBanned'] as const;

/** Rows the stream reads at once: a page of the record, formatted and handed to the socket before the next is read. */
const CSV_PAGE_ROWS = 500;

/** A field as RFC 4180 writes it: quoted when it holds a comma, a quote or a line break; none (null) an empty field. */
const csvField = (value: string | null | undefined) => {
  const text = value === null || value === undefined ? '' : String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
};

// Built by hand, a stream of rows at a time: of the fields only the operation is text that may need quoting.
function csvLine(row: UsageRow, groupBy: UsageQuery['groupBy']): string {
  const { refused } = row;
  const group = groupBy === 'key' ? `${row.keyId},` : groupBy === 'operation' ? `${csvField(row.operation)},` : '';
  return `${row.start},${group}${row.requests},${row.units},${refused.rateLimited},${refused.concurrency},${refused.credits},${refused.banned}\r\n`;
}

/**
 * The query's rows as CSV (RFC 4180: a header line, then a line per row, each ended by CRLF), read
 * page by page as the consumer takes them: the whole range in one answer, with no more than a page
 * of it in memory and no connection held between pages (docs/decisions/usage-paging.md).
 */
export async function* usageCsv(usage: UsageRepository, query: UsageQuery): AsyncGenerator<string> {
  const group = query.groupBy === 'key' ? ['keyId'] : query.groupBy === 'operation' ? ['operation'] : [];
  yield `${['start', ...group, ...CSV_COUNTS].join(',')}\r\n`;
  let after: UsagePosition | undefined;
  for (;;) {
    const rows = await usage.page(query, after, CSV_PAGE_ROWS);
    const more = rows.length > CSV_PAGE_ROWS;
    if (more) rows.length = CSV_PAGE_ROWS;
    if (rows.length > 0) yield rows.map((row) => csvLine(row, query.groupBy)).join('');
    if (!more) return;
    after = positionOf(rows.at(-1)!);
  }
}
