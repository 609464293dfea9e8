/**
 * Test fixture (not product code): the OpenAPI document as the node serves it, and validators compiled with ajv
 * (JSON Schema 2020-12) for an operation's request body and its answers.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { buildOpenApi } from '../../src/http/openapi.js';
import { routes } from '../../src/http/routes.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Doc = Record<string, any>;

export const document: Doc = buildOpenApi(routes);

const defsId = 'https://punctual.invalid/components';

/** `#/components/schemas/X` -> the same schema in the $defs document ajv holds. */
function rewriteRefs(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(rewriteRefs);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [k, k === '$ref' && typeof v === 'string' ? v.replace('#/components/schemas/', `${defsId}#/$defs/`) : rewriteRefs(v)]),
  );
}

/** Strict: an unknown keyword or a malformed schema is a compile error. Formats are annotations only. */
export function makeAjv(): Ajv2020 {
  const ajv = new Ajv2020({ strict: true, allErrors: true, validateFormats: false });
  ajv.addSchema({ $id: defsId, $defs: rewriteRefs(document.components.schemas) as object });
  return ajv;
}

const ajv = makeAjv();
const compiled = new Map<unknown, ValidateFunction>();

export function validatorOf(schema: Doc): ValidateFunction {
  let v = compiled.get(schema);
  if (v === undefined) {
    v = ajv.compile(rewriteRefs(schema) as object);
    compiled.set(schema, v);
  }
  return v;
}

/** The operation whose path template matches a concrete path (`/v1/jobs/report/cancel`), or null. */
export function findOperation(method: string, path: string): { template: string; op: Doc } | null {
  const segments = path.split('?', 1)[0]!.split('/');
  for (const [template, methods] of Object.entries(document.paths as Doc)) {
    const t = template.split('/');
    if (t.length !== segments.length) continue;
    if (!t.every((s, i) => (s.startsWith('{') && segments[i] !== '') || s === segments[i])) continue;
    const op = (methods as Doc)[method.toLowerCase()];
    if (op !== undefined) return { template, op };
  }
  return null;
}

/** Problems of a body against the operation's request schema ([] when it conforms). */
export function requestProblems(op: Doc, body: unknown): string[] {
  const schema = op.requestBody?.content?.['application/json']?.schema;
  if (schema === undefined) return ['the operation takes no body'];
  const v = validatorOf(schema);
  return v(body) ? [] : (v.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

/** Problems of an answer against the operation's declared answer for its status ([] when it conforms). */
export function answerProblems(op: Doc, status: number, contentType: string | undefined, body: unknown): string[] {
  const declared = op.responses[String(status)] ?? op.responses.default;
  if (op.responses[String(status)] === undefined) return [`status ${status} is not declared`];
  const content = declared.content as Doc | undefined;
  if (content === undefined) return body === null || body === '' ? [] : [`status ${status} declares no body`];
  const type = (contentType ?? '').split(';', 1)[0]!.trim();
  const media = content[type];
  if (media === undefined) return [`status ${status} does not declare ${type}`];
  if (type !== 'application/json' && type !== 'application/problem+json') return [];
  const v = validatorOf(media.schema);
  return v(body) ? [] : (v.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

export interface Example {
  source: string;
  method: string;
  path: string;
  /** The body's text as written (undefined: none). */
  body?: string;
}

/**
 * The example requests of a Markdown page: fenced ```json blocks that start with a request line (`PUT /v1/...`)
 * followed by the body; `curl` commands (`curl -X POST localhost:8080/v1/jobs -d '{...}'`); and inline
 * "`METHOD /path` with `{...}`".
 */
export function extractExamples(file: string, text: string): Example[] {
  const out: Example[] = [];
  for (const m of text.matchAll(/```json\n([A-Z]+) (\/\S+)\n([\s\S]*?)```/g)) {
    out.push({ source: `${file}: ${m[1]} ${m[2]}`, method: m[1]!, path: m[2]!, body: m[3]!.trim() });
  }
  for (const m of text.matchAll(/curl (?:-s )?(?:-X ([A-Z]+) )?(?:localhost|127\.0\.0\.1):\d+(\/\S*)(?: -d '([^']*)')?/g)) {
    const method = m[1] ?? (m[3] === undefined ? 'GET' : 'POST');
    out.push({ source: `${file}: curl ${method} ${m[2]}`, method, path: m[2]!, ...(m[3] === undefined ? {} : { body: m[3] }) });
  }
  for (const m of text.matchAll(/`([A-Z]+) (\/[^`\s]+)` with `(\{[^`]*\})`/g)) {
    out.push({ source: `${file}: ${m[1]} ${m[2]} with ${m[3]}`, method: m[1]!, path: m[2]!, body: m[3]! });
  }
  return out;
}

/** The keys of a schedule (the document's Schedule schema). */
const scheduleKeys = new Set(Object.keys(document.components.schemas.Schedule.properties));

/**
 * The schedules a page writes inline: code spans that are a JSON object whose keys are all schedule keys
 * (`{"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}`), or `"schedule": {...}`.
 */
export function scheduleFragments(text: string): string[] {
  const out: string[] = [];
  for (const [, span] of text.matchAll(/`([^`\n]+)`/g)) {
    const candidate = span!.startsWith('"schedule": ') ? span!.slice('"schedule": '.length) : span!;
    let value: unknown;
    try {
      value = JSON.parse(candidate);
    } catch {
      continue;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value) || Object.keys(value).length === 0) continue;
    if (Object.keys(value).every((k) => scheduleKeys.has(k))) out.push(candidate);
  }
  return out;
}
