/**
 * The peer port under attack, with real `punctual serve` processes (npm run build first): forged requests with
 * no credentials or a stolen protocol-1 proof, a replayed handshake, Raft frames with impossible numbers, the
 * refusal to run peers unauthenticated, and a cluster over mutual TLS (impostor certificates, SIGHUP reload).
 * Before: the peer port answered `list_tasks` (signing secrets included) to anyone posing as a member id, and
 * a heartbeat with term 1e300 was accepted.
 */
import { createHmac, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Packr } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authPath, helloPath, nodeIdHeader, nonceHeader, peerProtocol, proofHeader, protocolHeader, refusalHeader } from '../../src/http/peer/auth.js';
import { makeCa, makeNodeCert, type CertFiles } from '../../src/core/testing/certs.js';
import { assertBuilt } from '../../src/node/testing/processes.js';
import { startReceiver, waitFor, type Receiver } from '../../src/node/testing/receiver.js';
import { freePorts } from '../../src/node/testing/cluster.js';
import {
  jobFires, PeerSession, peerCounter, runServe, secret, startCluster, stopAll, terms, type Answer, type ServeNode,
} from './peer-bed.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });
const listTasks = new Uint8Array(packr.pack({ op: 'list_tasks' }));

let dir = '';
let rx: Receiver;
beforeAll(async () => {
  assertBuilt();
  dir = mkdtempSync(join(tmpdir(), 'punctual-peer-sec-'));
  rx = await startReceiver();
});
afterAll(async () => {
  await rx?.close();
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

/** What a refusal says, minus its date: must not depend on the node id the request claims. */
function view(a: Answer): unknown {
  const { date: _date, ...headers } = a.headers;
  return { status: a.status, headers, body: a.body.toString('hex') };
}

describe('peer start-up: no unauthenticated peers by accident', () => {
  it('--peers with neither peer TLS nor a cluster secret exits 2 with one line, unless --insecure-peers (then a warning at start)', async () => {
    const [api, peer] = await freePorts(2);
    const base = ['--listen', `127.0.0.1:${api}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', join(dir, 'insecure'), '--peers', 'n2=127.0.0.1:1'];
    const refused = await runServe(base);
    expect(refused.code).toBe(2);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).toMatch(/--peers: peers need authentication.*--insecure-peers/);
    const partial = await runServe([...base, '--peer-tls-cert-file', join(dir, 'x.crt')]);
    expect(partial.code).toBe(2);
    expect(partial.stderr).toMatch(/missing --peer-tls-key-file, --peer-tls-ca-file/);
    // Opted in: it starts, and says at start what it exposes.
    const check = await runServe([...base, '--insecure-peers', '--check-config']);
    expect(check.code).toBe(0);
    expect(JSON.parse(check.stdout)).toMatchObject({ insecurePeers: true });
    const { spawnServe, kill9 } = await import('../../src/node/testing/processes.js');
    const child = await spawnServe([...base, '--insecure-peers'], api!);
    try {
      await waitFor('the warning', () => /peer links WITHOUT authentication or TLS \(--insecure-peers\)/.test(child.stderr()), 5_000);
      expect(child.stderr()).toMatch(/"level":"warn".*"msg":"peer links WITHOUT authentication/);
    } finally {
      await kill9(child);
    }
  });
});

describe('growing a single node without peer authentication', () => {
  it('its first add-node is refused (409) instead of opening an unauthenticated peer port', async () => {
    const { spawnServe, kill9, call } = await import('../../src/node/testing/processes.js');
    const [api, peer] = await freePorts(2);
    const child = await spawnServe(['--listen', `127.0.0.1:${api}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', join(dir, 'alone')], api!);
    try {
      const r = await call(child, 'POST', '/v1/cluster/nodes', { id: 'n2', peer_addr: '127.0.0.1:9' });
      expect(r.status).toBe(409);
      expect(r.json.detail).toMatch(/peers need authentication/);
      // Nothing listens on the peer port.
      const { connect } = await import('node:net');
      const refused = await new Promise<boolean>((resolve) => {
        const s = connect(peer!, '127.0.0.1');
        s.on('connect', () => { s.destroy(); resolve(false); });
        s.on('error', () => resolve(true));
      });
      expect(refused).toBe(true);
    } finally {
      await kill9(child);
    }
  });
});

describe('a cluster with a cluster secret', () => {
  let nodes: ServeNode[] = [];
  beforeAll(async () => {
    nodes = await startCluster(join(dir, 'secret'), () => ['--cluster-secret', secret]);
    // A task with a signing secret: what list_tasks over the peer port used to hand out.
    const put = await (await fetch(`${nodes[0]!.child.base}/v1/tasks/signed`, {
      method: 'PUT', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: rx.url('/signed'), signing_secret: 'whsec-do-not-leak-0123456789' }),
    })).text();
    expect(put).not.toContain('"code"');
  }, 60_000);
  afterAll(() => stopAll(nodes));

  it('forged requests with no credentials or a stolen protocol-1 proof are refused, and say nothing about which ids exist', async () => {
    const n1 = nodes[0]!;
    const v1Proof = (id: string): string => createHmac('sha256', secret).update(`punctual-peer-v1:${id}`).digest('hex');
    const refusedBefore = await peerCounter(n1, 'refused');
    const answers: Array<{ id: string; v1: boolean; a: Answer }> = [];
    for (const id of ['n2', 'n3', 'intruder']) {
      for (const v1 of [false, true]) {
        const s = new PeerSession(n1.peerPort);
        const headers = { [nodeIdHeader]: id, 'x-punctual-kind': 'api', ...(v1 ? { 'x-punctual-cluster-secret': v1Proof(id) } : {}) };
        answers.push({ id, v1, a: await s.post('/raft/request', headers, listTasks) });
        s.close();
      }
    }
    for (const { a } of answers) {
      expect(a.status).toBe(403);
      expect(a.body.toString()).not.toContain('whsec');
    }
    for (const v1 of [false, true]) {
      const same = answers.filter((x) => x.v1 === v1).map((x) => view(x.a));
      expect(new Set(same.map((x) => JSON.stringify(x))).size).toBe(1);
    }
    expect(answers.find((x) => !x.v1)!.a.headers[refusalHeader]).toBe('unauthenticated');
    expect(answers.find((x) => x.v1)!.a.headers[refusalHeader]).toBe('protocol_version');
    // A hello is answered alike for a member and a stranger id.
    const hellos: Answer[] = [];
    for (const id of ['n2', 'intruder']) {
      const s = new PeerSession(n1.peerPort);
      hellos.push(await s.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: id, [nonceHeader]: 'ab'.repeat(32) }));
      s.close();
    }
    expect(hellos.map((h) => h.status)).toEqual([200, 200]);
    expect(Object.keys(hellos[0]!.headers).sort()).toEqual(Object.keys(hellos[1]!.headers).sort());
    expect(await peerCounter(n1, 'refused')).toBeGreaterThanOrEqual(refusedBefore + answers.length);
    await waitFor('refusals logged', () => /"msg":"peer request refused".*"reason":"protocol_version"/.test(n1.child.stderr()), 5_000);
  });

  it('a handshake recorded on one connection is refused when replayed on another', async () => {
    const n1 = nodes[0]!;
    const recorded = new PeerSession(n1.peerPort);
    const original = await recorded.handshake('n2', 'n1', secret);
    expect(original.auth.status).toBe(200);
    recorded.close();
    const replay = new PeerSession(n1.peerPort);
    const hello = await replay.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: 'n2', [nonceHeader]: original.clientNonce });
    expect(hello.headers[nonceHeader]).not.toBe(original.serverNonce);
    const auth = await replay.post(authPath, { [nodeIdHeader]: 'n2', [proofHeader]: original.proof });
    expect([auth.status, auth.headers[refusalHeader]]).toEqual([403, 'wrong_secret']);
    // The session is closed after a failed proof: nothing else goes through it.
    await expect(replay.post('/raft/request', { [nodeIdHeader]: 'n2', 'x-punctual-kind': 'api' }, listTasks)).rejects.toThrow();
    replay.close();
  });

  it('Raft frames with term 1e300, a negative or fractional index are refused (counted), and the cluster keeps working', async () => {
    const n1 = nodes[0]!;
    const termsBefore = await terms(n1);
    const badBefore = await peerCounter(n1, 'bad_frames');
    // Even an authenticated member (here: the test with the secret, speaking as n2) cannot push them in.
    const s = new PeerSession(n1.peerPort);
    expect((await s.handshake('n2', 'n1', secret)).auth.status).toBe(200);
    const hb = { type: 'heartbeat', group: 0, from: 'n2', to: 'n1', commit: 0, sentTick: 1, ctx: '' };
    const ap = { type: 'append', group: 1, from: 'n2', to: 'n1', term: 1, prevIndex: 0, prevTerm: 0, entries: [], commit: 0 };
    const frames = [
      [{ ...hb, term: 1e300 }], [{ ...hb, term: -1 }], [{ ...hb, term: 1, commit: 2.5 }],
      [{ ...ap, prevIndex: -3 }], [{ ...ap, commit: 0.5 }], [{ ...ap, term: 2 ** 60 }],
      [{ ...ap, entries: [{ index: -1, term: 1, type: 'normal', data: new Uint8Array(1), crc: 0 }] }],
    ];
    for (const f of frames) {
      const a = await s.post('/raft/messages', { [nodeIdHeader]: 'n2' }, new Uint8Array(packr.pack(f)));
      expect(a.status, JSON.stringify(f, (_k, v) => (typeof v === 'bigint' ? String(v) : v))).toBe(400);
    }
    s.close();
    expect(await peerCounter(n1, 'bad_frames')).toBe(badBefore + frames.length);
    await jobFires(nodes[1]!, rx, 'after-bad-frames');
    const after = await terms(n1);
    for (const [i, t] of after.entries()) {
      expect(Number.isSafeInteger(t)).toBe(true);
      expect(t).toBeLessThan(termsBefore[i]! + 10);
    }
    const fired = rx.of('after-bad-frames')[0]!;
    expect(String(fired.headers['x-punctual-fencing-token'])).toMatch(/^\d+\.\d+$/);
  });
});

describe('a cluster over mutual TLS', () => {
  let nodes: ServeNode[] = [];
  let certs: Record<string, CertFiles> = {};
  let tlsDir = '';
  const tlsFlags = (c: CertFiles): string[] => ['--peer-tls-cert-file', c.certFile, '--peer-tls-key-file', c.keyFile, '--peer-tls-ca-file', c.caFile];
  beforeAll(async () => {
    tlsDir = join(dir, 'certs');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(tlsDir);
    makeCa(tlsDir);
    certs = { n1: makeNodeCert(tlsDir, ['n1']), n2: makeNodeCert(tlsDir, ['n2']), n3: makeNodeCert(tlsDir, ['n3']), n9: makeNodeCert(tlsDir, ['n9']) };
    nodes = await startCluster(join(dir, 'tls'), (id) => tlsFlags(certs[id]!));
  }, 60_000);
  afterAll(() => stopAll(nodes));

  it('forms, says so at start, and fires a job', async () => {
    for (const n of nodes) expect(n.child.stderr()).toMatch(/"msg":"peer links: mutual TLS".*"mode":"tls"/);
    await jobFires(nodes[2]!, rx, 'over-tls');
    expect(rx.of('over-tls')).toHaveLength(1);
  });

  it('refuses a client whose certificate names another id, and a node cannot start with a certificate that does not name it', async () => {
    const n1 = nodes[0]!;
    // A valid certificate of the same CA, for n9, claiming to be n2.
    const impostor = new PeerSession(n1.peerPort, certs.n9);
    const a = await impostor.post('/raft/request', { [nodeIdHeader]: 'n2', 'x-punctual-kind': 'api' }, listTasks);
    impostor.close();
    expect([a.status, a.headers[refusalHeader]]).toEqual([403, 'unauthenticated']);
    // Without a client certificate the TLS handshake itself fails.
    const { connect } = await import('node:http2');
    const bare = connect(`https://127.0.0.1:${n1.peerPort}`, { ca: readFileSync(certs.n1!.caFile), servername: 'peer', checkServerIdentity: () => undefined });
    bare.on('error', () => {});
    const outcome = await new Promise<unknown>((resolve) => {
      const req = bare.request({ ':method': 'POST', ':path': '/raft/request', [nodeIdHeader]: 'n2', 'x-punctual-kind': 'api' });
      req.on('error', (err) => resolve(err));
      req.on('response', (h) => resolve(h[':status']));
      req.on('close', () => resolve('closed'));
      req.end(listTasks);
    });
    bare.destroy();
    expect(typeof outcome).not.toBe('number');
    // n3's flags with n9's certificate: refused at start (exit 1, the reason logged).
    const [api, peer] = await freePorts(2);
    const r = await runServe(['--node-id', 'n3', '--listen', `127.0.0.1:${api}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', join(dir, 'n3-bad'),
      '--peers', `n1=127.0.0.1:${n1.peerPort}`, ...tlsFlags(certs.n9!)]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('URI:punctual:node:n3');
  });

  it('SIGHUP reloads the peer certificate: new connections see the new one, the cluster keeps working', async () => {
    const n1 = nodes[0]!;
    const before = new X509Certificate(readFileSync(certs.n1!.certFile)).fingerprint256;
    makeNodeCert(tlsDir, ['n1']); // a new key and certificate in the same files
    const after = new X509Certificate(readFileSync(certs.n1!.certFile)).fingerprint256;
    expect(after).not.toBe(before);
    n1.child.proc.kill('SIGHUP');
    await waitFor('reloaded', () => n1.child.stderr().split('\n').some((l) => l.includes('"msg":"peer TLS reloaded"') && l.includes(after)), 5_000);
    const seen = await new Promise<string>((resolve, reject) => {
      const s = new PeerSession(n1.peerPort, certs.n2);
      s.session.on('error', reject);
      s.session.on('connect', () => {
        resolve((s.session.socket as import('node:tls').TLSSocket).getPeerCertificate().fingerprint256);
        s.close();
      });
    });
    expect(seen).toBe(after);
    expect(n1.child.proc.exitCode).toBeNull();
    await jobFires(nodes[1]!, rx, 'after-reload');
  });
});
