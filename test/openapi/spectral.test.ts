/**
 * The document as third-party tools read it: Spectral's OpenAPI ruleset (`spectral:oas`, its recommended rules,
 * the ruleset `spectral lint` applies by default) finds no error and no warning in /v1/openapi.json as a real
 * `punctual serve` process serves it. Spectral runs offline here (a dev dependency, no ruleset fetched); a finding
 * fails the test with its rule, path and message. `npm run build` first: the node runs dist/cmd/punctual.js.
 */
import { Document, Spectral, type ISpectralDiagnostic, type RulesetDefinition } from '@stoplight/spectral-core';
import { Json } from '@stoplight/spectral-parsers';
import { oas } from '@stoplight/spectral-rulesets';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServe, type ServeProcess } from '../../src/client/testing/serve.js';

/** Spectral's severities: 0 error, 1 warning, 2 information, 3 hint. */
const severityNames = ['error', 'warning', 'info', 'hint'];

async function lint(text: string): Promise<ISpectralDiagnostic[]> {
  const spectral = new Spectral();
  // oas is a whole ruleset; its declared type omits the `extends` that RulesetDefinition requires, hence the cast
  spectral.setRuleset({ extends: [[oas as RulesetDefinition, 'recommended']] });
  return spectral.run(new Document(text, Json, 'openapi.json'));
}

function describeFindings(findings: readonly ISpectralDiagnostic[]): string[] {
  return findings.map((f) => `${severityNames[f.severity] ?? f.severity} ${String(f.code)} at ${f.path.join('.') || '(root)'}: ${f.message}`);
}

let node: ServeProcess;
let served: string;

beforeAll(async () => {
  node = await startServe();
  const res = await fetch(`${node.base}/v1/openapi.json`);
  expect(res.status).toBe(200);
  served = await res.text();
});

afterAll(async () => {
  expect(await node?.stop()).toBe(0);
});

describe('Spectral (spectral:oas, recommended) on the served document', () => {
  it('reports no error and no warning', async () => {
    const findings = await lint(served);
    const blocking = describeFindings(findings.filter((f) => f.severity <= 1));
    if (blocking.length > 0) console.error(`Spectral on /v1/openapi.json:\n${blocking.join('\n')}`);
    expect(blocking).toEqual([]);
    // information and hints do not fail the build, but they are shown rather than lost
    const rest = describeFindings(findings.filter((f) => f.severity > 1));
    if (rest.length > 0) console.info(`Spectral information and hints:\n${rest.join('\n')}`);
  });

  it('does report what the ruleset forbids (the lint has teeth): a shared operationId, no description, a trailing slash', async () => {
    const doc = JSON.parse(served) as { info: Record<string, unknown>; servers?: unknown; paths: Record<string, Record<string, Record<string, unknown>>> };
    const [first, second] = Object.keys(doc.paths);
    const firstOp = Object.values(doc.paths[first!]!)[0]!;
    const secondOp = Object.values(doc.paths[second!]!)[0]!;
    secondOp.operationId = firstOp.operationId;
    delete firstOp.description;
    doc.paths[`${first!}/`] = doc.paths[first!]!;
    delete doc.info.contact;
    delete doc.servers;
    const codes = (await lint(JSON.stringify(doc))).filter((f) => f.severity <= 1).map((f) => String(f.code));
    expect(new Set(codes)).toEqual(
      new Set(['operation-operationId-unique', 'operation-description', 'path-keys-no-trailing-slash', 'info-contact', 'oas3-api-servers']),
    );
  });
});
