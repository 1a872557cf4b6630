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

/** JSON numbers are exact only up to 2^53 - 1, so that is the documented ceiling of every int64 field. */
export const MAX_ID = Number.MAX_SAFE_INTEGER;

/** An identifier a caller sends (a path parameter, a reference in a body); each use adds its description. */
export const Id = Type.Integer({
  minimum: 1,
  maximum: MAX_ID,
  format: 'int64',
  'x-error-message': `must be an integer from 1 to ${MAX_ID}`,
});

/** The `cursor` of every listing: the one the previous page's rel="next" link carries. */
export const Cursor = Type.Optional(
  Type.String({
    maxLength: 200,
    description: 'Opaque cursor from the rel="next" Link header of the previous page',
    'x-error-message': 'must be the cursor of a rel="next" link',
  }),
);
