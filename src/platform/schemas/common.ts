import { FormatRegistry, Type, type Static, type TSchema } from '@sinclair/typebox';

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

// Names are checked by patterns that TypeBox runs on UTF-16 code units (no `u` flag), so a
// character outside the BMP is a surrogate pair here. Refused anywhere in a name: controls (C0, C1;
// NUL cannot be stored in PostgreSQL text), the bidi embeddings, overrides and isolates
// (decisions/names.md), and a lone surrogate, which PostgreSQL would store as U+FFFD.
const REFUSED = '\\u0000-\\u001f\\u007f-\\u009f\\u202a-\\u202e\\u2066-\\u2069';
const CHARACTER = `(?:[^${REFUSED}\\ud800-\\udfff]|[\\ud800-\\udbff][\\udc00-\\udfff])`;
// What shows nothing: white space, the blank braille cell U+2800, and Unicode's
// Default_Ignorable_Code_Point (format characters such as U+200B and U+00AD, the Hangul fillers
// U+115F, U+1160, U+3164 and U+FFA0, variation selectors, tags); past the BMP, by surrogates:
// U+1BCA0-1BCA3, U+1D173-1D17A, U+E0000-E0FFF.
const INVISIBLE =
  '\\s\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0f\\uffa0\\ufff0-\\ufff8';
const INVISIBLE_PAIR = '\\ud82f[\\udca0-\\udca3]|\\ud834[\\udd73-\\udd7a]|[\\udb40-\\udb43]';
const VISIBLE = `(?!${INVISIBLE_PAIR})(?:[^${REFUSED}${INVISIBLE}\\ud800-\\udfff]|[\\ud800-\\udbff][\\udc00-\\udfff])`;

/**
 * A name a person reads (a pet's, a key's, an admin token's), one rule for all: 1 to `max`
 * characters (code points, as PostgreSQL counts them; maxLength would count UTF-16 units), one of
 * them visible, none of REFUSED; refused rather than altered. `emptyAllowed`: '' is also valid,
 * for "no name".
 */
export const Name = ({ max, description, emptyAllowed = false }: { max: number; description: string; emptyAllowed?: boolean }) => {
  const name = `(?=[\\s\\S]*${VISIBLE})${CHARACTER}{1,${max}}`;
  return Type.String({
    pattern: emptyAllowed ? `^(?:${name})?$` : `^${name}$`,
    description,
    'x-error-message': `must be ${emptyAllowed ? 'empty or ' : ''}1 to ${max} characters, one of them visible, without control characters, bidi overrides or lone surrogates`,
  });
};

// Text in Unicode's composed form (NFC), which "é" has as one character: its decomposed form
// (e and U+0301) looks the same and is another string to PostgreSQL's unique index.
FormatRegistry.Set('nfc', (value) => value.normalize('NFC') === value);

/**
 * An id a person reads and compares (a customer's externalId): a name by the rule above, and no
 * look-alike of another: every character visible but single spaces between words (none at either
 * end), so no invisible or directional character anywhere, and in NFC (decisions/names.md).
 */
export const Identifier = ({ max, description }: { max: number; description: string }) =>
  Type.String({
    pattern: `^(?=${CHARACTER}{1,${max}}$)${VISIBLE}(?: ?${VISIBLE})*$`,
    format: 'nfc',
    description,
    'x-error-message': `must be 1 to ${max} characters in Unicode NFC, each visible but single spaces between words, without invisible, directional or control characters`,
  });

/** A value or null, as OpenAPI 3.0 writes it (`nullable`), for responses. */
export const Nullable = <T extends TSchema>(schema: T) => Type.Unsafe<Static<T> | null>({ ...schema, nullable: true });

/** One of a few strings (a plan, a state), refused with the list of them. */
export const Literals = <T extends string>(values: readonly T[], description: string) =>
  Type.Union(
    values.map((value) => Type.Literal(value)),
    { description, 'x-error-message': `must be one of ${values.join(', ')}` },
  );

/** An instant in an answer, as RFC 3339 writes it. */
export const Timestamp = Type.String({ format: 'date-time' });
