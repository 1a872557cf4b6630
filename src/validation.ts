import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify';
import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Value } from '@sinclair/typebox/value';
import { quote } from './errors.js';

/**
 * Validates with TypeBox's compiled checks, as @fastify/type-provider-typebox's compiler does,
 * with two rules on top. JSON bodies are checked exactly as sent (no coercion); query and path
 * parameters, strings on the wire, are converted by TypeBox to the schema's types and take its
 * defaults, but only strictly (see keepStrict). A schema's `x-error-message` (an OpenAPI
 * extension, so the document stays valid) replaces TypeBox's wording. Headers, strings all, are
 * checked as sent.
 */
export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  const check = TypeCompiler.Compile(schema);
  // TypeBox converts in place, so it converts a copy and the wire text stays there to compare.
  // Headers are checked as they are: every header the service reads is a string, and copying and
  // walking all of a request's headers would cost a cached read more than anything else it does.
  const fromWire =
    httpPart === 'body' || httpPart === 'headers'
      ? (input: unknown) => input
      : (input: unknown) => Value.Default(schema, keepStrict(input, Value.Convert(schema, Value.Clone(input))));
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

/**
 * Keeps a converted parameter only where its text on the wire is exactly how the converted value
 * is written: `7` and `true` convert, while `007`, `1e3`, ` 1` and `1.5` for an integer, or `1`
 * for a boolean, stay strings and fail validation rather than being read loosely (TypeBox alone
 * would read `1.5` as 1). Walks objects and arrays, so it holds for any shape of parameters.
 */
function keepStrict(wire: unknown, converted: unknown): unknown {
  if (typeof wire === 'string') return typeof converted !== 'string' && String(converted) !== wire ? wire : converted;
  if (Array.isArray(wire) && Array.isArray(converted)) return converted.map((item, index) => keepStrict(wire[index], item));
  if (isRecord(wire) && isRecord(converted)) {
    for (const key of Object.keys(converted)) converted[key] = keepStrict(wire[key], converted[key]);
  }
  return converted;
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** "body/name must be ...": the part of the request, the field, and what it must be. */
export function formatValidationError(errors: FastifySchemaValidationError[], dataVar: string): Error {
  const [first] = errors;
  const field = first?.instancePath ? `${dataVar}${quote(first.instancePath)}` : dataVar;
  let message = first?.message ?? 'is invalid';
  if (message === 'expected required property') message = 'is required';
  return new Error(`${field} ${message}`);
}
