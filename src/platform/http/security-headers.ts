/**
 * On every response: no sniffing, and no caching of what a key was allowed to see. A 200 or 304
 * of a read relaxes no-store to revalidation (platform/http/conditional-requests.ts).
 */
export const SECURITY_HEADERS = { 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' } as const;
