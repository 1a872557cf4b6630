import { describe, expect, it } from 'vitest';
import { concurrencyCosts, concurrencyLine, stealNote, summarize, type RowResult } from '../../bench/report.js';
import { BARE_ROW, LIST, rowId, type Row } from '../../bench/scenarios.js';
import { round } from '../support/bench-rounds.js';

describe('bench: the report of a row', () => {
  it("gives the kernel's part of the CPU per request beside the whole, each the median over the rounds", () => {
    const hot = rowId('ours-memory', LIST);
    const [bare, ours] = summarize([
      {
        row: { id: BARE_ROW, server: 'bare', databaseCeiling: BARE_ROW } as Row,
        rounds: [round(30_000, 24, 5, 8), round(31_000, 23, 5, 8), round(29_000, 25, 5, 9)],
        warmups: [],
      },
      {
        row: { id: hot, server: 'ours-memory', databaseCeiling: BARE_ROW } as Row,
        rounds: [round(14_000, 70, 5, 17, 0.02), round(15_000, 66, 5, 12, 0.3), round(13_000, 74, 5, 21, 0.05)],
        warmups: [],
      },
    ]);
    expect(bare).toMatchObject({ serverCpuUsPerResponse: 24, serverSystemCpuUsPerResponse: 8 });
    expect(ours).toMatchObject({ serverCpuUsPerResponse: 70, serverSystemCpuUsPerResponse: 17, stealShare: 0.05 });
  });

  it("says how much of the machine's time the hypervisor took: the median measurement and the worst", () => {
    expect(stealNote([0.02, 0.3, 0.05, 0])).toMatch(
      /^Steal time: the hypervisor gave 4% of this machine's CPU time .* 30% during the worst/,
    );
  });

  it('states what concurrency limits cost each store on the hot page: on over off, round by round', () => {
    const hot = (server: Row['server'], rounds: RowResult['rounds']): RowResult => ({
      row: { id: rowId(server, LIST), server } as Row,
      rounds,
      warmups: [],
    });
    // Redis per round 0.90x, 0.80x and 0.95x the req/s (median 0.90x; the medians' ratio would be 18,000 / 20,500, 0.88x).
    const costs = concurrencyCosts([
      hot('ours-memory', [round(30_000, 30), round(30_000, 30), round(30_000, 30)]),
      hot('ours-memory-concurrency', [round(30_000, 30), round(29_400, 31), round(30_000, 30)]),
      hot('ours-redis', [round(20_000, 40), round(22_500, 40), round(20_500, 40)]),
      hot('ours-redis-concurrency', [round(18_000, 44), round(18_000, 46), round(19_475, 43)]),
    ]);
    expect(costs.find((cost) => cost.store === 'Redis store')).toMatchObject({
      servers: { off: 'ours-redis', on: 'ours-redis-concurrency' },
      off: { requestsPerSecond: 20_500, serverCpuUsPerResponse: 40 },
      on: { requestsPerSecond: 18_000, serverCpuUsPerResponse: 44 },
      requestsPerSecondRatio: 0.9,
      cpuRatio: 1.1,
    });
    expect(concurrencyLine(costs)).toBe(
      '**With Redis, concurrency limits on serve the hot page at 0.90x the req/s and 1.10x the CPU per request of the same store ' +
        'with them off.** With the memory store: 1.00x the req/s and 1.00x the CPU per request of the same store with them off.',
    );
  });
});
