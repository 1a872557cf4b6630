import type { Round } from '../../bench/report.js';

/** A measured round of the benchmark, every request answered 200. */
export const round = (
  requestsPerSecond: number,
  serverCpuUsPerResponse: number,
  p99Ms = 5,
  serverSystemCpuUsPerResponse = 0,
  stealShare = 0,
): Round => ({
  responses: requestsPerSecond,
  seconds: 1,
  requestsPerSecond,
  p50Ms: 1,
  p99Ms,
  statuses: { '200': requestsPerSecond },
  non2xx: 0,
  failed: 0,
  serverCpuUsPerResponse,
  serverSystemCpuUsPerResponse,
  stealShare,
});
