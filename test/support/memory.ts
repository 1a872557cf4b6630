/** Heap in use after a full garbage collection (the suite runs with --expose-gc). */
export function heapAfterGc(): number {
  globalThis.gc!();
  return process.memoryUsage().heapUsed;
}
