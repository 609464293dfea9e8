/**
 * `/docs`: the OpenAPI document (openapi.ts) rendered as one static HTML page: operations grouped by tag, their
 * parameters, bodies field by field, answers, and the named schemas. No script at all and no other origin: the
 * page works offline, and its Content-Security-Policy allows only its own stylesheet, by hash.
 */
import { createHash } from 'node:crypto';
import type { JsonSchema } from './schema.js';

type Doc = JsonSchema;

const style = `
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2330;background:#fff;margin:0}
header{background:#1d2330;color:#fff;padding:16px 32px}header h1{margin:0;font-size:22px}header p{margin:4px 0 0;color:#c9d1e0}
.wrap{display:flex}nav{width:280px;flex:none;padding:16px;border-right:1px solid #e3e6ec;position:sticky;top:0;height:100vh;overflow:auto;box-sizing:border-box;font-size:13px}
nav h3{margin:14px 0 4px;font-size:12px;text-transform:uppercase;color:#5b6475}nav a{display:block;color:#1d2330;text-decoration:none;padding:1px 0}nav a:hover{text-decoration:underline}
main{padding:16px 32px;max-width:1100px;min-width:0}h2{border-bottom:2px solid #1d2330;padding-bottom:4px;margin-top:36px}
section.op{border:1px solid #e3e6ec;border-radius:6px;padding:12px 16px;margin:16px 0}
.m{display:inline-block;min-width:58px;text-align:center;font:bold 12px ui-monospace,monospace;color:#fff;border-radius:4px;padding:2px 6px;margin-right:8px}
.get{background:#2b6cb0}.post{background:#2f855a}.put{background:#b7791f}.patch{background:#6b46c1}.delete{background:#c53030}
code,.path{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}.path{font-weight:bold}
table{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:13px}th,td{border:1px solid #e3e6ec;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f7fa}td.n{white-space:nowrap}.req{color:#c53030;font-weight:bold}.scope{font-size:12px;color:#5b6475}
h4{margin:12px 0 2px;font-size:14px}p.d{margin:4px 0}
`;

function esc(text: unknown): string {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function refName(schema: JsonSchema): string | null {
  const ref = schema.$ref;
  return typeof ref === 'string' ? ref.slice(ref.lastIndexOf('/') + 1) : null;
}

/** A one-line description of a schema's type and bounds. */
function typeText(s: JsonSchema): string {
  const name = refName(s);
  if (name !== null) return `<a href="#schema-${esc(name)}">${esc(name)}</a>`;
  if (Array.isArray(s.anyOf)) {
    const parts = s.anyOf as JsonSchema[];
    return parts.map((p) => (p.type === 'null' ? 'null' : typeText(p))).join(' or ');
  }
  if (Array.isArray(s.oneOf)) return (s.oneOf as JsonSchema[]).map(typeText).join(' | ');
  if (Array.isArray(s.allOf) && s.allOf.length === 1) return typeText((s.allOf as JsonSchema[])[0]!);
  if (s.const !== undefined) return `<code>${esc(JSON.stringify(s.const))}</code>`;
  if (Array.isArray(s.enum)) return (s.enum as unknown[]).map((v) => `<code>${esc(v)}</code>`).join(' | ');
  // anyCaseEnum (schema.ts): the values, not the pattern that spells each letter both ways
  if (s.pattern !== undefined && Array.isArray(s.examples)) return `${(s.examples as unknown[]).map((v) => `<code>${esc(v)}</code>`).join(' | ')} (any case)`;
  const bounds: string[] = [];
  if (s.minimum !== undefined || s.maximum !== undefined) bounds.push(`${s.minimum ?? ''} .. ${s.maximum ?? ''}`);
  if (s.minLength !== undefined && s.minLength !== 1) bounds.push(`at least ${s.minLength} characters`);
  if (s.maxLength !== undefined) bounds.push(`at most ${s.maxLength} characters`);
  if (s.format !== undefined) bounds.push(String(s.format));
  if (s.pattern !== undefined) bounds.push(`<code>${esc(s.pattern)}</code>`);
  if (s.minItems !== undefined || s.maxItems !== undefined) bounds.push(`${s.minItems ?? 0} .. ${s.maxItems ?? ''} items`);
  if (s.maxProperties !== undefined) bounds.push(`at most ${s.maxProperties} entries`);
  if (s.type === 'object' && s.properties !== undefined) {
    // an answer written in place (a list): its fields in one line
    const fields = Object.entries(s.properties as Record<string, JsonSchema>).map(([k, v]) => `<code>${esc(k)}</code>: ${typeText(v)}`);
    return `{${fields.join(', ')}}`;
  }
  let type = esc(typeof s.type === 'string' ? s.type : 'any JSON'); // HTML from here on
  if (s.type === 'array' && typeof s.items === 'object') type = `array of ${typeText(s.items as JsonSchema)}`;
  if (s.type === 'object' && typeof s.additionalProperties === 'object') type = `object of ${typeText(s.additionalProperties as JsonSchema)}`;
  return bounds.length === 0 ? type : `${type} (${bounds.join(', ')})`;
}

/** The object's fields as rows; inline objects nest with dotted names. */
function fieldRows(s: JsonSchema, prefix: string, depth: number): string {
  const props = (s.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((s.required ?? []) as string[]);
  let rows = '';
  for (const [key, p] of Object.entries(props)) {
    const name = prefix + key;
    const dflt = p.default === undefined ? '' : `<code>${esc(JSON.stringify(p.default))}</code>`;
    rows += `<tr><td class="n"><code>${esc(name)}</code>${required.has(key) ? ' <span class="req">required</span>' : ''}</td>`;
    const inner = inlineObject(p);
    const type = inner === null ? typeText(p) : inner === p ? 'object' : 'object or null'; // its fields follow
    rows += `<td>${type}</td><td>${dflt}</td><td>${esc(p.description ?? '')}</td></tr>`;
    if (inner !== null && depth < 4) rows += fieldRows(inner, `${name}.`, depth + 1);
  }
  return rows;
}

/** An object schema written in place (not a $ref), possibly inside `X or null`. */
function inlineObject(p: JsonSchema): JsonSchema | null {
  if (p.type === 'object' && p.properties !== undefined) return p;
  if (Array.isArray(p.anyOf)) {
    const first = (p.anyOf as JsonSchema[])[0]!;
    if (first.type === 'object' && first.properties !== undefined) return first;
  }
  return null;
}

/** A schema's fields as a table; a body given by `$ref` is shown in place (with a link to its schema). */
function schemaBlock(s: JsonSchema, schemas: Record<string, JsonSchema>): string {
  const name = refName(s);
  if (name !== null) {
    const target = schemas[name];
    const link = `<p class="d">Schema ${typeText(s)}.</p>`;
    return target === undefined || target.properties === undefined ? link : link + schemaBlock(target, schemas);
  }
  const description = typeof s.description === 'string' ? `<p class="d">${esc(s.description)}</p>` : '';
  if (s.type !== 'object' || s.properties === undefined) return `${description}<p class="d">${typeText(s)}</p>`;
  return `${description}<table><tr><th>field</th><th>type</th><th>default</th><th>description</th></tr>${fieldRows(s, '', 0)}</table>`;
}

function operationHtml(path: string, method: string, op: Doc, schemas: Record<string, JsonSchema>): string {
  const id = `op-${esc(op.operationId)}`;
  let html = `<section class="op" id="${id}"><div><span class="m ${esc(method)}">${esc(method.toUpperCase())}</span><span class="path">${esc(path)}</span></div>`;
  html += `<p class="d"><b>${esc(op.summary)}</b>${op.description === undefined ? '' : ` ${esc(op.description)}`}</p>`;
  const scope = op['x-punctual-scope'];
  html += `<p class="scope">${scope === undefined ? 'No token needed.' : `Token scope: <b>${esc(scope)}</b>.`}</p>`;
  const params = (op.parameters ?? []) as Doc[];
  if (params.length > 0) {
    html += '<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>type</th><th>default</th><th>description</th></tr>';
    for (const p of params) {
      const schema = p.schema as JsonSchema;
      const dflt = schema.default === undefined ? '' : `<code>${esc(JSON.stringify(schema.default))}</code>`;
      html += `<tr><td class="n"><code>${esc(p.name)}</code>${p.required === true ? ' <span class="req">required</span>' : ''}</td><td>${esc(p.in)}</td>`;
      html += `<td>${typeText(schema)}</td><td>${dflt}</td><td>${esc(p.description ?? schema.description ?? '')}</td></tr>`;
    }
    html += '</table>';
  }
  const body = op.requestBody as Doc | undefined;
  if (body !== undefined) {
    const schema = ((body.content as Doc)['application/json'] as Doc).schema as JsonSchema;
    html += `<h4>Body (JSON${body.required === true ? '' : ', optional'})</h4>${schemaBlock(schema, schemas)}`;
  }
  html += '<h4>Answers</h4><table><tr><th>status</th><th>description</th><th>body</th></tr>';
  for (const [status, r] of Object.entries(op.responses as Record<string, Doc>)) {
    const content = r.content as Record<string, Doc> | undefined;
    const media = content === undefined ? '' : Object.entries(content).map(([type, c]) => `${esc(type)}: ${typeText(c.schema as JsonSchema)}`).join('<br>');
    html += `<tr><td class="n">${esc(status)}</td><td>${esc(r.description)}</td><td>${media}</td></tr>`;
  }
  return `${html}</table></section>`;
}

/** The page and the Content-Security-Policy that goes with it. */
export function renderDocsPage(doc: Doc): { html: string; csp: string } {
  const info = doc.info as Doc;
  const paths = doc.paths as Record<string, Record<string, Doc>>;
  const byTag = new Map<string, Array<[string, string, Doc]>>();
  for (const [path, methods] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const tag = (op.tags as string[])[0]!;
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag)!.push([path, method, op]);
    }
  }
  const tags = (doc.tags as Doc[]).map((t) => [String(t.name), String(t.description)] as const);
  const schemas = (doc.components as Doc).schemas as Record<string, JsonSchema>;
  let nav = '';
  let main = `<p class="d">${esc(info.description)}</p><p class="d">The machine-readable document: <a href="/v1/openapi.json"><code>/v1/openapi.json</code></a> (OpenAPI ${esc(doc.openapi)}).</p>`;
  for (const [tag, description] of tags) {
    nav += `<h3>${esc(tag)}</h3>`;
    main += `<h2 id="tag-${esc(tag)}">${esc(tag)}</h2><p class="d">${esc(description)}</p>`;
    for (const [path, method, op] of byTag.get(tag) ?? []) {
      nav += `<a href="#op-${esc(op.operationId)}"><code>${esc(method.toUpperCase())}</code> ${esc(path)}</a>`;
      main += operationHtml(path, method, op, schemas);
    }
  }
  nav += '<h3>Schemas</h3>';
  main += '<h2 id="schemas">Schemas</h2>';
  for (const [name, s] of Object.entries(schemas)) {
    nav += `<a href="#schema-${esc(name)}">${esc(name)}</a>`;
    main += `<section class="op" id="schema-${esc(name)}"><h4>${esc(name)}</h4>${schemaBlock(s, schemas)}</section>`;
  }
  const html =
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">` +
    `<title>${esc(info.title)}</title><style>${style}</style></head><body>` +
    `<header><h1>${esc(info.title)}</h1><p>${esc(info.summary)} API version ${esc(info.version)}.</p></header>` +
    `<div class="wrap"><nav>${nav}</nav><main>${main}</main></div></body></html>\n`;
  const styleHash = createHash('sha256').update(style).digest('base64');
  const csp = `default-src 'none'; style-src 'sha256-${styleHash}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;
  return { html, csp };
}
