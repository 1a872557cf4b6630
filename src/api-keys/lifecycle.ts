/**
 * What an API key goes through, as the repository stores it and the admin API and the keys command
 * show it: active until it expires (past expiresAt), is revoked, or is rotated into another key
 * (rotated: replaced, working on until its expiresAt, the end of the overlap).
 */
export const KEY_STATES = ['active', 'expired', 'revoked', 'rotated'] as const;
export type KeyState = (typeof KEY_STATES)[number];

/** How long a rotated key keeps working by default: a day to roll the new one out. */
export const DEFAULT_OVERLAP_SECONDS = 86_400;
/** The longest overlap: 30 days; two keys of one customer should not both work for longer. */
export const MAX_OVERLAP_SECONDS = 30 * 86_400;
