import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify';
import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler, type ValueError } from '@sinclair/typebox/compiler';
import { ValueErrorType } from '@sinclair/typebox/errors';
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
  // walking all of a request's headers is the dearest step of a cached read.
  const withDefaults = defaultsOf(schema);
  const fromWire =
    httpPart === 'body' || httpPart === 'headers'
      ? (input: unknown) => input
      : (input: unknown) => withDefaults(keepStrict(input, Value.Convert(schema, copyOf(input))));
  return (input) => {
    const value = fromWire(input);
    if (check.Check(value)) return { value };
    // Every missing field is named at once, so a caller does not learn them one request at a time.
    const found = [...check.Errors(value)].flatMap(insideUnion);
    const missing = found.filter((error) => error.type === ValueErrorType.ObjectRequiredProperty);
    return { error: (missing.length > 0 ? missing : found.slice(0, 1)).map(toFastifyError) };
  };
};

/**
 * Fills in a parameters object's missing properties with their schema's defaults. Query and path
 * parameters are flat objects, so one pass over the properties that declare a default does what
 * TypeBox's Value.Default does, without walking the whole schema on every request (half the cost
 * of validating a query). Any other shape is left to Value.Default.
 */
function defaultsOf(schema: TSchema): (value: unknown) => unknown {
  const properties = (schema.type === 'object' ? schema.properties : undefined) as Record<string, TSchema> | undefined;
  if (!properties || !Object.values(properties).every(isScalar)) return (value) => Value.Default(schema, value);
  const defaults = Object.entries(properties).flatMap(([name, property]) =>
    'default' in property ? [[name, property.default as unknown] as const] : [],
  );
  return (value) => {
    if (isRecord(value)) for (const [name, fallback] of defaults) if (value[name] === undefined) value[name] = fallback;
    return value;
  };
}

/** A schema of a value with no parts (a number, a string, a choice of literals): nothing inside it can have a default. */
const isScalar = (schema: TSchema): boolean =>
  !('properties' in schema) && !('items' in schema) && ((schema.anyOf ?? schema.oneOf ?? []) as TSchema[]).every(isScalar);

/** The parsed query string, copied: values are strings, or arrays of them for a repeated name. */
function copyOf(input: unknown): unknown {
  if (!isRecord(input)) return Value.Clone(input);
  const copy: Record<string, unknown> = {};
  for (const name in input) {
    const value = input[name];
    copy[name] = Array.isArray(value)
      ? [...(value as unknown[])]
      : typeof value === 'object' && value !== null
        ? Value.Clone(value)
        : value;
  }
  return copy;
}

/**
 * The errors inside the one choice of a union whose errors all lie within the value (an object
 * where the other choice is null): what is wrong with a field of it, named, rather than the union's
 * wording for the whole. Any other union error stays as it is (a value none of the choices' types).
 */
export function insideUnion(error: ValueError): ValueError[] {
  if (error.type !== ValueErrorType.Union) return [error];
  const inside = error.errors
    .map((choice) => [...choice])
    .filter((errors) => errors.length > 0 && errors.every((each) => each.path.startsWith(`${error.path}/`)));
  return inside.length === 1 ? inside[0]!.flatMap(insideUnion) : [error];
}

function toFastifyError(error: ValueError): FastifySchemaValidationError {
  const required = error.type === ValueErrorType.ObjectRequiredProperty;
  return {
    keyword: required ? 'required' : String(error.type),
    instancePath: error.path,
    schemaPath: '',
    params: {},
    // A missing field's schema holds what a value must be, which is not what is wrong with it.
    message: required
      ? 'is required'
      : ((error.schema as { 'x-error-message'?: string })['x-error-message'] ?? error.message.toLowerCase()),
  };
}

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
  const field = (error: FastifySchemaValidationError) => (error.instancePath ? `${dataVar}${quote(error.instancePath)}` : dataVar);
  const missing = errors.filter((error) => error.keyword === 'required');
  if (missing.length > 1) return new Error(`${missing.map(field).join(', ')} are required`);
  const [first] = errors;
  return new Error(first ? `${field(first)} ${first.message ?? 'is invalid'}` : `${dataVar} is invalid`);
}
