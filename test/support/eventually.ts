import { sleep } from './time.js';

/** Polls a condition until it holds, for changes that reach the app asynchronously (NOTIFY). */
export async function eventually(condition: () => Promise<boolean>, timeoutMs = 5_000): Promise<number> {
  const started = Date.now();
  while (!(await condition())) {
    if (Date.now() - started > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(20);
  }
  return Date.now() - started;
}
