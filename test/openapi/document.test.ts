/**
 * The OpenAPI document: valid OpenAPI 3.1 by a standard validator, every schema valid JSON Schema 2020-12, the
 * same bytes every time, and complete: every route the router answers is in it with its parameters, and the
 * live routes refuse what their documented parameters and bodies do not allow. Then /v1/openapi.json and /docs
 * as served: open without a token, /docs static HTML under a strict Content-Security-Policy.
 */
import { createHash } from 'node:crypto';
import { Validator } from '@seriousme/openapi-schema-validator';
import { describe, expect, it } from 'vitest';
import { buildOpenApi, documentationGaps, openApiPath } from '../../src/http/openapi.js';
import { routes } from '../../src/http/routes.js';
import { TokenSet } from '../../src/http/tokens.js';
import { call, makeHarness } from '../../src/http/testing/harness.js';
import { document, makeAjv, validatorOf, type Doc } from './document.js';

const methods = ['get', 'put', 'post', 'delete', 'patch'];

describe('the document', () => {
  it('is valid OpenAPI 3.1 (@seriousme/openapi-schema-validator, the official schemas)', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(document));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('every schema in it compiles as strict JSON Schema 2020-12 (ajv)', () => {
    expect(() => makeAjv()).not.toThrow();
    for (const [name, schema] of Object.entries(document.components.schemas as Doc)) expect(() => validatorOf(schema), name).not.toThrow();
    for (const [path, ops] of Object.entries(document.paths as Doc)) {
      for (const [method, op] of Object.entries(ops as Doc)) {
        const body = op.requestBody?.content?.['application/json']?.schema;
        if (body !== undefined) expect(() => validatorOf(body), `${method} ${path} body`).not.toThrow();
        for (const p of op.parameters ?? []) expect(() => validatorOf(p.schema), `${method} ${path} ${p.name}`).not.toThrow();
        for (const [status, r] of Object.entries(op.responses as Doc)) {
          for (const media of Object.values((r as Doc).content ?? {})) expect(() => validatorOf((media as Doc).schema), `${method} ${path} ${status}`).not.toThrow();
        }
      }
    }
  });

  it('is the same bytes every time it is built, and as served', async () => {
    const first = JSON.stringify(buildOpenApi(routes));
    expect(JSON.stringify(buildOpenApi(routes))).toBe(first);
    const served = await makeHarness().app.handle({ method: 'GET', path: '/v1/openapi.json', headers: {}, body: new Uint8Array() });
    expect(served.body).toBe(first);
    const again = await makeHarness().app.handle({ method: 'GET', path: '/v1/openapi.json', headers: {}, body: new Uint8Array() });
    expect(createHash('sha256').update(again.body as string).digest('hex')).toBe(createHash('sha256').update(first).digest('hex'));
    expect(first).not.toMatch(/127\.0\.0\.1|localhost|https?:/); // nothing of the deployment
    expect(JSON.parse(first).servers).toEqual([{ url: '/', description: expect.any(String) }]); // relative: the node that served it
  });
});

describe('every route of the router is in the document', () => {
  it('no route lacks its description (add it to the table with op(): src/http/README.md)', () => {
    expect(documentationGaps(routes)).toEqual([]);
    // a route registered without op() is named (this is what fails when one is added the old way)
    const undocumented = { method: 'GET', segments: ['v1', 'overview'], scope: 'read' as const, handler: routes[0]!.handler };
    expect(documentationGaps([...routes, undocumented])).toEqual(['GET /v1/overview']);
    // an alias is described by the route it names, and only when that one is documented
    const alias = { ...undocumented, segments: ['v1', 'overview', ''], aliasOf: '/v1/overview' };
    expect(documentationGaps([...routes, alias])).toEqual([]);
    expect(documentationGaps([...routes, { ...alias, aliasOf: '/v1/nowhere' }])).toEqual(['GET /v1/overview/']);
  });

  it('each route is an operation of its path and method, with exactly its path parameters', () => {
    const seen = new Set<string>();
    for (const route of routes) {
      const path = route.aliasOf ?? openApiPath(route); // an alias (/ui/ of /ui) is its route's operation
      const op = document.paths[path]?.[route.method.toLowerCase()];
      expect(op, `${route.method} ${path}`).toBeDefined();
      seen.add(`${route.method.toLowerCase()} ${path}`);
      const pathParams = route.segments.filter((s) => s.startsWith(':')).map((s) => s.slice(1));
      const documented = (op.parameters ?? []).filter((p: Doc) => p.in === 'path').map((p: Doc) => p.name);
      expect(documented, `${route.method} ${path}`).toEqual(pathParams);
      const query = (op.parameters ?? []).filter((p: Doc) => p.in === 'query').map((p: Doc) => p.name);
      const families = (route.doc?.query?.prefixed ?? []).map((f) => `${f.prefix}KEY`);
      expect(query, `${route.method} ${path}`).toEqual([...Object.keys(route.doc?.query?.params ?? {}), ...families]);
    }
    // and nothing else: every operation of the document is a route
    for (const [path, ops] of Object.entries(document.paths as Doc)) {
      for (const method of Object.keys(ops as Doc).filter((m) => methods.includes(m))) expect(seen.has(`${method} ${path}`), `${method} ${path}`).toBe(true);
    }
  });

  it('the live routes check what the document says: a bad path parameter, an unknown query parameter, an unknown body field are 400s naming them', async () => {
    const { app } = makeHarness();
    for (const route of routes) {
      const doc = route.doc!;
      const label = `${route.method} ${openApiPath(route)}`;
      const params = route.segments.filter((s) => s.startsWith(':'));
      const good = (s: string): string => (s === ':shard' ? '0' : s === ':id' && route.segments[2] === 'nodes' ? 'n9' : s.startsWith(':') ? 'x' : s);
      const goodPath = '/' + route.segments.map(good).join('/');
      for (const p of params) {
        const bad = '/' + route.segments.map((s) => (s === p ? '%20' : good(s))).join('/');
        const res = await call(app, route.method, bad, doc.body === undefined ? undefined : {});
        expect([res.status, res.json.errors?.map((e: Doc) => e.field)], `${label} ${p}`).toEqual([400, expect.arrayContaining([p.slice(1)])]);
      }
      if (doc.query !== undefined) {
        const res = await call(app, route.method, `${goodPath}?zz_unknown=1`);
        expect([res.status, res.json.errors?.map((e: Doc) => e.field)], label).toEqual([400, ['zz_unknown']]);
      }
      if (doc.body !== undefined) {
        const res = await call(app, route.method, goodPath, { zz_unknown: 1 });
        expect([res.status, res.json.errors?.map((e: Doc) => e.field)], label).toEqual([400, expect.arrayContaining(['zz_unknown'])]);
        // and the document refuses it too: every body is a closed object
        expect(validatorOf(document.paths[openApiPath(route)][route.method.toLowerCase()].requestBody.content['application/json'].schema)({ zz_unknown: 1 }), label).toBe(false);
      }
    }
  });
});

describe('served: /v1/openapi.json and /docs', () => {
  const tokens = new TokenSet(null, [{ name: 'reader', scope: 'read', token: 'read-token-0123456789' }]);

  it('need no token on a node that requires tokens (the description is not secret); every other /v1 path still does', async () => {
    const { app } = makeHarness({ tokens });
    const doc = await call(app, 'GET', '/v1/openapi.json');
    expect([doc.status, doc.headers['content-type'], doc.json.openapi]).toEqual([200, 'application/json', '3.1.0']);
    const head = await app.handle({ method: 'HEAD', path: '/v1/openapi.json', headers: {}, body: new Uint8Array() });
    expect(head.status).toBe(200);
    expect((await call(app, 'GET', '/docs')).status).toBe(200);
    expect((await call(app, 'GET', '/v1/jobs')).status).toBe(401);
    expect((await call(app, 'GET', '/v1/no-such-route')).status).toBe(401);
    const post = await call(app, 'POST', '/v1/openapi.json', {});
    expect(post.status).toBe(401); // only GET/HEAD are open: another method is an unknown operation
    expect((await call(app, 'POST', '/v1/openapi.json', {}, { authorization: 'Bearer read-token-0123456789' })).status).toBe(405);
  });

  it('/docs is one static page: no script, nothing from another origin, its one stylesheet allowed by hash', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'GET', '/docs');
    const html = res.json as string;
    expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    const csp = res.headers['content-security-policy']!;
    expect(csp).toMatch(/^default-src 'none'; style-src 'sha256-[A-Za-z0-9+/=]+'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'$/);
    const styles = [...html.matchAll(/<style>([\s\S]*?)<\/style>/g)].map((m) => m[1]!);
    expect(styles).toHaveLength(1);
    expect(csp).toContain(`'sha256-${createHash('sha256').update(styles[0]!).digest('base64')}'`);
    expect(html).not.toMatch(/<script|<link|<img|<iframe|\son[a-z]+=|style="/i);
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//i);
    // every in-page link lands on an element of the page
    const ids = new Set([...html.matchAll(/ id="([^"]+)"/g)].map((m) => m[1]));
    for (const [, target] of html.matchAll(/href="#([^"]+)"/g)) expect(ids.has(target), target).toBe(true);
    // every operation is on it, with its method and path
    for (const [path, ops] of Object.entries(document.paths as Doc)) {
      for (const [method, op] of Object.entries(ops as Doc)) {
        expect(html, `${method} ${path}`).toContain(`id="op-${op.operationId}"`);
        expect(html).toContain(`${method.toUpperCase()}</span><span class="path">${path.replace(/&/g, '&#38;')}</span>`);
      }
    }
    expect(html).toContain('<code>retry.max_attempts</code>'); // fields of nested objects are listed too
  });
});
