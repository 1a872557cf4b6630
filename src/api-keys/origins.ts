import { originProblem } from '../platform/schemas/origin.js';
import { OriginFormError, RepeatedOriginError } from './errors.js';

/**
 * The web origins a browser key is bound to, checked beyond what the Origin schema can say: each
 * exactly as browsers send it in `Origin` (originProblem: `https://A.com` or `https://a.com:443` would
 * never match), and none twice. An OriginFormError or RepeatedOriginError naming `${field}/<i>`
 * otherwise. How many there may be (1 to 20) is the schema's to say, and the column's.
 */
export function checkedOrigins(origins: readonly string[], field = 'allowedOrigins'): string[] {
  origins.forEach((origin, index) => {
    const problem = originProblem(origin);
    if (problem !== undefined) throw Object.assign(new OriginFormError(problem), { field: `${field}/${index}` });
    if (origins.indexOf(origin) < index)
      throw Object.assign(new RepeatedOriginError(JSON.stringify(origin)), { field: `${field}/${index}` });
  });
  return [...origins];
}

/** Whether two lists of origins (or nulls) are the same, in the same order. */
export const sameOrigins = (a: readonly string[] | null, b: readonly string[] | null): boolean =>
  a === b || (a !== null && b !== null && a.length === b.length && a.every((origin, i) => origin === b[i]));
