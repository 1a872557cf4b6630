/** On every response: no sniffing, and no caching of what a key was allowed to see. */
export const SECURITY_HEADERS = { 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' } as const;
