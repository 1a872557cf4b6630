import type { CreditClaim, CreditStanding } from './store.js';

/** The ARGV of a request's balances of credits, as the decision scripts take them (see CREDITS in redis-scripts.ts); the count first. */
export const creditArgs = (credits: readonly CreditClaim[] = []): Array<string | number> => [
  credits.length,
  ...credits.flatMap(({ base, version, seed }) => [base, version, seed?.spent ?? '', seed?.version ?? '']),
];

/** The balances' standings a script answered, from position `from` on: remaining (null when unseeded) and version of each. */
export function creditStandings(decided: readonly (number | null)[], from: number): CreditStanding[] {
  const standings: CreditStanding[] = [];
  for (let i = from; i + 1 < decided.length; i += 2) standings.push({ remaining: decided[i] ?? null, version: decided[i + 1]! });
  return standings;
}
