import { Name } from '../platform/schemas/common.js';

/** Who or what holds an admin token: a key's name, but never none (the keys command is its only input). */
export const AdminTokenName = Name({
  max: 200,
  description: 'Who or what holds the admin token: up to 200 characters, one of them visible; no control characters or bidi overrides',
});
