/**
 * API tokens and their scopes. `--auth-token` is one admin token; `--auth-tokens-file` holds named tokens, one per
 * line as `NAME SCOPE TOKEN` (blank lines and `#` comments ignored), re-read on SIGHUP. A request is matched
 * against every token in constant time: each secret is compared as a SHA-256 digest (equal lengths, the token's
 * length does not leak) and the loop never stops early.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';

export type Scope = 'read' | 'write' | 'admin';
export const scopes: readonly Scope[] = ['read', 'write', 'admin'];
const scopeRank: Record<Scope, number> = { read: 1, write: 2, admin: 3 };

/** Secrets shorter than this (bytes, UTF-8) are refused: a guessable token is no protection. */
export const secretBytesMin = 16;

/** Who made a request: the token's name and scope (`auth-token` for --auth-token). */
export interface Principal {
  name: string;
  scope: Scope;
}

export interface TokenEntry extends Principal {
  token: string;
}

/** True when `granted` allows what `needed` asks. */
export function scopeAllows(granted: Scope, needed: Scope): boolean {
  return scopeRank[granted] >= scopeRank[needed];
}

const namePattern = /^[A-Za-z0-9._:-]{1,64}$/;

/** Parses a tokens file; throws Error naming the 1-based line at fault (never echoing a token). */
export function parseTokensFile(text: string): TokenEntry[] {
  const entries: TokenEntry[] = [];
  const names = new Set<string>();
  const secrets = new Set<string>();
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `line ${i + 1}`;
    const parts = line.split(/\s+/);
    if (parts.length !== 3) throw new Error(`${where}: expected NAME SCOPE TOKEN, got ${parts.length} fields`);
    const [name, scope, token] = parts as [string, string, string];
    if (!namePattern.test(name)) throw new Error(`${where}: name must match [A-Za-z0-9._:-]{1,64}`);
    if (!(scopes as readonly string[]).includes(scope)) throw new Error(`${where}: scope must be read, write or admin, got ${JSON.stringify(scope)}`);
    if (Buffer.byteLength(token, 'utf8') < secretBytesMin) throw new Error(`${where}: token shorter than ${secretBytesMin} bytes`);
    if (names.has(name)) throw new Error(`${where}: duplicate name ${JSON.stringify(name)}`);
    if (secrets.has(token)) throw new Error(`${where}: the same token as an earlier line`);
    names.add(name);
    secrets.add(token);
    entries.push({ name, scope: scope as Scope, token });
  });
  return entries;
}

/** Reads and parses a tokens file; throws Error (`FILE: line N: ...` or `FILE: cannot read`). */
export function readTokensFile(path: string): TokenEntry[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : String(err);
    throw new Error(`${JSON.stringify(path)}: cannot read: ${code}`);
  }
  try {
    return parseTokensFile(text);
  } catch (err) {
    throw new Error(`${JSON.stringify(path)}: ${(err as Error).message}`);
  }
}

interface Hashed extends Principal {
  digest: Buffer;
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/**
 * The tokens a node accepts. `enabled` is false only when neither --auth-token nor --auth-tokens-file was given
 * (then every request is let in, as admin). replaceFileTokens swaps the file's set at once (SIGHUP).
 */
export class TokenSet {
  private fixed: Hashed[];
  private fromFile: Hashed[] = [];
  readonly enabled: boolean;

  constructor(authToken: string | null, fileTokens: TokenEntry[] | null) {
    this.fixed = authToken === null ? [] : [{ name: 'auth-token', scope: 'admin', digest: digest(authToken) }];
    this.enabled = authToken !== null || fileTokens !== null;
    if (fileTokens !== null) this.replaceFileTokens(fileTokens);
  }

  replaceFileTokens(entries: TokenEntry[]): void {
    this.fromFile = entries.map((e) => ({ name: e.name, scope: e.scope, digest: digest(e.token) }));
  }

  /** Names of the tokens read from the file (for logs). */
  fileTokenNames(): string[] {
    return this.fromFile.map((e) => e.name);
  }

  /** The principal of an `Authorization: Bearer` header, or null. Unauthenticated open nodes answer admin. */
  authenticate(header: string | undefined): Principal | null {
    if (!this.enabled) return { name: 'anonymous', scope: 'admin' };
    const m = header === undefined ? null : /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
    const got = digest(m === null ? '' : m[1]!);
    let found: Principal | null = null;
    for (const entry of [...this.fixed, ...this.fromFile]) {
      // every entry is compared, whether or not an earlier one matched
      if (timingSafeEqual(got, entry.digest) && found === null && m !== null) found = { name: entry.name, scope: entry.scope };
    }
    return found;
  }
}
