import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify';
import type { TObject, TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';

/** Only a plain decimal integer converts: "1.5", "1e3", " 1" and "007" stay strings and fail. */
const DECIMAL_INTEGER = /^-?(0|[1-9][0-9]*)$/;

/**
 * Validates with TypeBox's compiled checks. JSON bodies are checked exactly as sent (no
 * coercion). Query and path parameters are strings on the wire: integer fields are converted
 * when they are written as decimal integers, and missing fields take their schema defaults.
 * A schema's `x-error-message` (an OpenAPI extension, so the document stays valid) replaces TypeBox's wording.
 */
export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  const check = TypeCompiler.Compile(schema);
  const fromWire = httpPart === 'body' ? (input: unknown) => input : wireConverter(schema as TObject);
  return (input) => {
    const value = fromWire(input);
    if (check.Check(value)) return { value };
    const first = check.Errors(value).First()!;
    const error: FastifySchemaValidationError = {
      keyword: String(first.type),
      instancePath: first.path,
      schemaPath: '',
      params: {},
      message: (first.schema as { 'x-error-message'?: string })['x-error-message'] ?? first.message.toLowerCase(),
    };
    return { error: [error] };
  };
};

function wireConverter(schema: TObject) {
  const fields = Object.entries(schema.properties ?? {});
  const integers = fields.filter(([, field]) => field.type === 'integer').map(([name]) => name);
  const defaults = fields.filter(([, field]) => field.default !== undefined);
  return (input: unknown) => {
    const value = { ...(input as Record<string, unknown>) };
    for (const name of integers) {
      const raw = value[name];
      if (typeof raw === 'string' && DECIMAL_INTEGER.test(raw)) value[name] = Number(raw);
    }
    for (const [name, field] of defaults) value[name] ??= field.default;
    return value;
  };
}

/** "body/name must be ...": the part of the request, the field, and what it must be. */
export function formatValidationError(errors: FastifySchemaValidationError[], dataVar: string): Error {
  const [first] = errors;
  const field = first?.instancePath ? `${dataVar}${first.instancePath}` : dataVar;
  let message = first?.message ?? 'is invalid';
  if (message === 'expected required property') message = 'is required';
  return new Error(`${field} ${message}`);
}
