import { describe, expect, it } from 'vitest';
import { stealNote, summarize } from '../../bench/report.js';
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
});
