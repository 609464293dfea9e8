/**
 * The schemas of the client API: each one both READS a parsed JSON value (recording the API's `{field, message}`
 * problems in an Issues collector, validate.ts) and DESCRIBES what it accepts as JSON Schema 2020-12, which
 * openapi.ts puts in the OpenAPI document. Parsers (parse.ts, parse-job.ts) read every field through these, and
 * routes.ts declares them on each route, so the document cannot drift from what a request is checked against.
 *
 * A schema says the shape (types, lengths, patterns, ranges, closed objects). What JSON Schema cannot say (a cron
 * that never matches, an unknown time zone, rules between fields, the scheduler model's checks) stays code after
 * the shape check, and is written in the schema's `description` so the document is honest about it. The
 * document may accept a value the node refuses for such a reason; it never refuses one the node accepts.
 */
import {
  Issues,
  fieldAt,
  onlyKeys,
  readBool,
  readEnum,
  readInt,
  readNumber,
  readObject,
  readPattern,
  readString,
  type JsonObject,
} from './validate.js';

/** A JSON Schema 2020-12 object, as it appears in the document. */
export type JsonSchema = { [key: string]: unknown };

/** What a few readers need beyond the value: the node's now (`delay_ms`, "now"), the SSRF guard of callback URLs. */
export interface ReadContext {
  nowMs?: number;
  /** Why the node refuses a callback URL whose host is a literal address, or null (src/dispatch/target-policy.ts). */
  urlCheck?: (url: string) => string | null;
}

export interface Schema<T> {
  /** What the value may be, as JSON Schema. */
  readonly json: JsonSchema;
  /** A present value (not absent; not null where null means absent) -> T, or undefined with its problems recorded. */
  read(value: unknown, field: string, issues: Issues, ctx?: ReadContext): T | undefined;
}

type Reader<T> = Schema<T>['read'];

/** A schema from its JSON Schema and its reader (the reader must accept no value the JSON Schema refuses). */
export function custom<T>(json: JsonSchema, read: Reader<T>): Schema<T> {
  return { json, read };
}

/** The same reader with a description (and any other annotation) added to its JSON Schema. */
export function annotate<T>(schema: Schema<T>, description: string, extra: JsonSchema = {}): Schema<T> {
  return { json: { ...schema.json, description, ...extra }, read: schema.read };
}

// --- named schemas: `components.schemas` of the document -----------------------------------------------------

const components = new Map<string, JsonSchema>();

/**
 * A schema the document defines once under `components.schemas.<name>` and refers to by `$ref`. Names are
 * registered when their module loads; a name given twice is a programmer error.
 */
export function named<T>(name: string, schema: Schema<T>): Schema<T> {
  if (components.has(name)) throw new Error(`schema ${name} is defined twice`);
  components.set(name, schema.json);
  return { json: { $ref: `#/components/schemas/${name}` }, read: schema.read };
}

/** A response (or other document-only) shape under `components.schemas.<name>`: never read, only described. */
export function namedShape(name: string, json: JsonSchema): JsonSchema {
  return named(name, custom(json, () => undefined)).json;
}

/** Every named schema, by name (sorted: the document is the same on every build). */
export function namedSchemas(): Record<string, JsonSchema> {
  return Object.fromEntries([...components.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

// --- scalars --------------------------------------------------------------------------------------------------

export function integer(min: number, max: number, description?: string): Schema<number> {
  return custom({ type: 'integer', minimum: min, maximum: max, ...(description === undefined ? {} : { description }) }, (v, field, issues) =>
    readInt(v, field, min, max, issues));
}

export function number(min: number, max: number, description?: string): Schema<number> {
  return custom({ type: 'number', minimum: min, maximum: max, ...(description === undefined ? {} : { description }) }, (v, field, issues) =>
    readNumber(v, field, min, max, issues));
}

export function boolean(description?: string): Schema<boolean> {
  return custom({ type: 'boolean', ...(description === undefined ? {} : { description }) }, (v, field, issues) =>
    readBool(v, field, issues));
}

/**
 * A non-empty string of at most maxLength characters. JSON Schema counts code points, the reader UTF-16 code
 * units: the reader's bound is never looser than the document's.
 */
export function string(maxLength: number, description?: string): Schema<string> {
  return custom({ type: 'string', minLength: 1, maxLength, ...(description === undefined ? {} : { description }) }, (v, field, issues) =>
    readString(v, field, maxLength, issues));
}

/** A string matching an anchored pattern (which bounds its length); `what` is how a message shows the pattern. */
export function pattern(re: RegExp, what: string, description?: string): Schema<string> {
  return custom({ type: 'string', pattern: re.source, ...(description === undefined ? {} : { description }) }, (v, field, issues) =>
    readPattern(v, field, re, what, issues));
}

export function enumOf<T extends string>(values: readonly T[], description?: string): Schema<T> {
  return custom({ type: 'string', enum: [...values], ...(description === undefined ? {} : { description }) }, (v, field, issues) =>
    readEnum(v, field, values, issues));
}

/**
 * One of `values` in any case, read as upper case (`post` is `POST`). JSON Schema has no case-insensitive enum:
 * the pattern spells each letter both ways, and the description names the values.
 */
export function anyCaseEnum<T extends string>(values: readonly T[], description: string): Schema<T> {
  const spelled = values.map((v) => v.replace(/[A-Za-z]/g, (c) => `[${c.toUpperCase()}${c.toLowerCase()}]`));
  const json = {
    type: 'string',
    pattern: `^(?:${spelled.join('|')})$`,
    examples: [...values], // what a reader of the document wants to see (docs-page.ts shows these, not the pattern)
    description: `${description} One of ${values.join(', ')}, in any case.`,
  };
  return custom(json, (v, field, issues) => {
    if (typeof v !== 'string') return issues.add(field, 'must be a string');
    return readEnum(v.toUpperCase(), field, values, issues);
  });
}

/** Any JSON value. */
export function anyJson(description: string): Schema<unknown> {
  return custom({ description }, (v) => v);
}

// --- composites -----------------------------------------------------------------------------------------------

/** JSON Schema of `schema` or null. */
export function orNull(json: JsonSchema): JsonSchema {
  return { anyOf: [json, { type: 'null' }] };
}

/** An array of `item`s, minItems..maxItems long; every item is read (so one 400 names every bad item). */
export function arrayOf<T>(item: Schema<T>, minItems: number, maxItems: number, description?: string): Schema<T[]> {
  const json = { type: 'array', items: item.json, minItems, maxItems, ...(description === undefined ? {} : { description }) };
  return custom(json, (v, field, issues, ctx) => {
    if (!Array.isArray(v) || v.length < minItems || v.length > maxItems) return issues.add(field, `must be an array of ${minItems} to ${maxItems} items`);
    const out: T[] = [];
    v.forEach((x: unknown, i) => {
      const read = item.read(x, `${field}[${i}]`, issues, ctx);
      if (read !== undefined) out.push(read);
    });
    return out.length === v.length ? out : undefined;
  });
}

/**
 * One field of an object: its schema; `required`; its `default` (the value an absent field takes, shown in the
 * document as the API writes it); `nullable: false` when null is a value of its own rather than "absent"
 * (docs/api.md: null is the same as absent, except where a field says otherwise).
 */
export interface Field<T> {
  schema: Schema<T>;
  required?: boolean;
  default?: T;
  /** The default as JSON when it differs from the value the parser gets (a document-only `default`). */
  defaultJson?: unknown;
  nullIsValue?: boolean;
  description?: string;
}

export function field<T>(schema: Schema<T>, options: Omit<Field<NoInfer<T>>, 'schema'> = {}): Field<T> {
  return { schema, ...options };
}

type FieldMap = Record<string, Field<any>>;
/** A field's value after reading: the value, its default (or null) when absent, undefined when invalid. */
export type FieldValue<F> = F extends Field<infer T> ? T | null | undefined : never;
/** A whole object's values: each field's value, or its default (or null) when absent. */
export type Values<F extends FieldMap> = { [K in keyof F]: F[K] extends Field<infer T> ? T | null : never };

export interface ObjectSchema<F extends FieldMap> extends Schema<Values<F>> {
  readonly fields: F;
  readonly keys: readonly (keyof F & string)[];
  /** The value as an object with only known keys (unknown keys recorded by name), or undefined when not an object. */
  open(value: unknown, field: string, issues: Issues): JsonObject | undefined;
  /** One field of an opened object: absent (or null, unless the field says otherwise) -> its default or null. */
  get<K extends keyof F & string>(o: JsonObject, key: K, prefix: string, issues: Issues, ctx?: ReadContext): FieldValue<F[K]>;
}

/**
 * A closed object (unknown keys are refused by name: a typo must not be ignored). Its generic `read` reads every
 * field in declaration order (undefined when any is invalid, every problem recorded); parsers whose fields depend on each other open the object and `get` fields one by
 * one in the order their rules need, which keeps the same fields and schemas.
 */
export function object<F extends FieldMap>(fields: F, description?: string): ObjectSchema<F> {
  const keys = Object.keys(fields) as (keyof F & string)[];
  const properties: Record<string, JsonSchema> = {};
  for (const key of keys) properties[key] = fieldJson(fields[key]!);
  const required = keys.filter((k) => fields[k]!.required === true);
  const json: JsonSchema = {
    type: 'object',
    ...(description === undefined ? {} : { description }),
    properties,
    ...(required.length > 0 ? { required } : {}),
    additionalProperties: false,
  };
  const open = (value: unknown, path: string, issues: Issues): JsonObject | undefined => {
    const o = readObject(value, path, issues);
    if (o !== undefined) onlyKeys(o, keys, path, issues);
    return o;
  };
  const get = <K extends keyof F & string>(o: JsonObject, key: K, prefix: string, issues: Issues, ctx?: ReadContext): FieldValue<F[K]> => {
    const f = fields[key]!;
    const v = o[key];
    const absent = v === undefined || (v === null && f.nullIsValue !== true);
    if (!absent) return f.schema.read(v, fieldAt(prefix, key), issues, ctx) as FieldValue<F[K]>;
    if (f.required === true) return issues.add(fieldAt(prefix, key), 'is required') as FieldValue<F[K]>;
    return (f.default === undefined ? null : f.default) as FieldValue<F[K]>;
  };
  const read = (value: unknown, path: string, issues: Issues, ctx?: ReadContext): Values<F> | undefined => {
    const o = open(value, path, issues);
    if (o === undefined) return undefined;
    const out: Record<string, unknown> = {};
    for (const key of keys) out[key] = get(o, key, path, issues, ctx);
    return Object.values(out).includes(undefined) ? undefined : (out as Values<F>);
  };
  return { json, read, fields, keys, open, get };
}

function fieldJson(f: Field<unknown>): JsonSchema {
  const base = f.description === undefined ? f.schema.json : withDescription(f.schema.json, f.description);
  const withDefault = f.defaultJson !== undefined ? { ...base, default: f.defaultJson } : f.default !== undefined ? { ...base, default: f.default } : base;
  // Optional fields accept null: as "absent" (docs/api.md, Conventions), or as a value of its own (nullIsValue:
  // a JSON payload null, metadata null clearing it in a patch). Required fields refuse it.
  if (f.required === true) return withDefault;
  return orNullKeeping(withDefault);
}

/** A `$ref` cannot take siblings in every tool: wrap it to describe it. */
function withDescription(json: JsonSchema, description: string): JsonSchema {
  return '$ref' in json ? { allOf: [json], description } : { ...json, description };
}

/** `X or null`, with X's description and default kept on the outside, where a reader looks for them. */
function orNullKeeping(json: JsonSchema): JsonSchema {
  const { description, default: dflt, ...rest } = json;
  const inner = Object.keys(rest).length === 1 && Array.isArray(rest.allOf) ? (rest.allOf as JsonSchema[])[0]! : rest;
  return {
    ...(description === undefined ? {} : { description }),
    anyOf: [inner, { type: 'null' }],
    ...(dflt === undefined ? {} : { default: dflt }),
  };
}

/** An object of string keys to values of one schema (names checked by `names`), at most maxProperties of them. */
export function recordOf(names: RegExp, value: JsonSchema, maxProperties: number, description: string, read: Reader<Record<string, string>>): Schema<Record<string, string>> {
  return custom({ type: 'object', description, propertyNames: { pattern: names.source }, additionalProperties: value, maxProperties }, read);
}

// --- query parameters -----------------------------------------------------------------------------------------

/** One query parameter: read from its text (an empty value counts as absent). */
export interface QueryParam<T> {
  json: JsonSchema;
  description: string;
  read(text: string, name: string, issues: Issues): T | undefined;
}

/** A family of query parameters named by a prefix (`metadata.KEY`): accepted here, read by the route. */
export interface PrefixedParam {
  prefix: string;
  json: JsonSchema;
  description: string;
}

export interface QuerySchema<P extends Record<string, QueryParam<any>>> {
  readonly params: P;
  readonly prefixed: readonly PrefixedParam[];
  /** Every parameter (absent -> null), unknown ones recorded by name; throws nothing. */
  read(query: URLSearchParams, issues: Issues): { [K in keyof P]: (P[K] extends QueryParam<infer T> ? T : never) | null };
}

/** The query of a list route: only these parameters (unknown ones are refused by name). */
export function query<P extends Record<string, QueryParam<any>>>(params: P, prefixed: readonly PrefixedParam[] = []): QuerySchema<P> {
  return {
    params,
    prefixed,
    read(q, issues) {
      for (const name of new Set(q.keys())) {
        if (Object.hasOwn(params, name) || prefixed.some((p) => name.startsWith(p.prefix))) continue;
        issues.add(name, 'unknown query parameter');
      }
      const out: Record<string, unknown> = {};
      for (const [name, p] of Object.entries(params)) {
        const text = q.get(name);
        out[name] = text === null || text === '' ? null : (p.read(text, name, issues) ?? null);
      }
      return out as never;
    },
  };
}

/** A query parameter checked by a value schema (which receives the text). */
export function textParam<T>(schema: Schema<T>, description: string): QueryParam<T> {
  return { json: schema.json, description, read: (text, name, issues) => schema.read(text, name, issues) };
}

/** An integer query parameter in min..max (digits only). */
export function intParam(min: number, max: number, dflt: number, description: string): QueryParam<number> {
  const schema = integer(min, max);
  return {
    json: { ...schema.json, default: dflt },
    description,
    // A negative or huge integer is an integer out of range (said so), not "not an integer".
    read: (text, name, issues) => schema.read(/^-?\d+$/.test(text) ? Number(text) : NaN, name, issues),
  };
}
