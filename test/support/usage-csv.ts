/** A row of the usage record as GET /admin/v1/usage answers it in JSON. */
export interface UsageRow {
  start: string;
  keyId?: number;
  operation?: string | null;
  requests: number;
  units: number;
  refused: { rateLimited: number; concurrency: number; credits: number; banned: number };
}

/**
 * What the CSV of JSON rows is: a header line, then a line per row, the refused kinds as columns,
 * CRLF after each; an unmatched operation (null) an empty field. The group's column is the one the
 * rows carry (`keyId` or `operation`), or `groupBy`'s when there are no rows.
 */
export function csvOf(rows: UsageRow[], groupBy?: 'key' | 'operation'): string {
  const first = rows[0];
  const carried = first && ('keyId' in first ? 'keyId' : 'operation' in first ? 'operation' : undefined);
  const group = first ? carried : groupBy === 'key' ? 'keyId' : groupBy;
  const header = [
    'start',
    ...(group ? [group] : []),
    'requests',
    'units',
    'refusedRateLimited',
    'refusedConcurrency',
    'refusedCredits',
    'refusedBanned',
  ];
  const lines = rows.map(({ start, requests, units, refused: r, ...grouped }) =>
    [start, ...(group ? [grouped[group] ?? ''] : []), requests, units, r.rateLimited, r.concurrency, r.credits, r.banned].join(','),
  );
  return [header.join(','), ...lines].map((line) => `${line}\r\n`).join('');
}
