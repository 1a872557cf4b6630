import { Type } from '@sinclair/typebox';

/** Entries in a page when the caller does not say. */
export const DEFAULT_PAGE_SIZE = 20;

/** The `limit` of every listing: optional, 1 to 100, 20 when absent. */
export const PageLimit = (description: string) =>
  Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: 100,
      default: DEFAULT_PAGE_SIZE,
      description,
      'x-error-message': 'must be an integer from 1 to 100',
    }),
  );
