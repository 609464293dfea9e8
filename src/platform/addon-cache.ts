/**
 * Unpacking the embedded SQLite addon (and its small JS module) to disk so it can be dlopen()ed: the single
 * executable cannot load a shared object from its own memory.
 *
 * Files go to `<cache>/<cacheKey>/<name>`: written once to a temp file then renamed (so copies starting at the
 * same moment never see a half-written file), checked against their sha256 at every start. A cache folder must
 * belong to this user and not be writable by others (anyone who can write there could swap the addon we load).
 * Candidates in order: PUNCTUAL_CACHE_DIR (alone when set), $XDG_CACHE_HOME/punctual, ~/.cache/punctual,
 * <tmp>/punctual-<uid>, <binary folder>/.punctual-cache. A candidate that fails (read-only, noexec, foreign
 * owner) passes to the next; when none works the error names each reason and what to do, in one line.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';

export interface CacheDirCandidate {
  dir: string;
  /** Where the folder came from, for messages: "PUNCTUAL_CACHE_DIR", "XDG_CACHE_HOME", "HOME", ... */
  from: string;
}

export interface CacheFile {
  name: string;
  sha256: string;
  /** The content, read lazily: only when the cached copy is missing or damaged. */
  bytes: () => Buffer;
}

/** A cache problem the user can fix; `message` is one line without the `punctual: ` prefix. */
export class AddonCacheError extends Error {
  override name = 'AddonCacheError';
}

/** A candidate that did not work: the next one is tried. */
class CandidateProblem extends Error {}

const fixHint = 'set PUNCTUAL_CACHE_DIR to a folder you own, on a filesystem mounted without noexec';

export function cacheDirCandidates(input: {
  env: Record<string, string | undefined>;
  uid: number;
  tmpDir: string;
  execPath: string;
}): CacheDirCandidate[] {
  const { env } = input;
  const explicit = env.PUNCTUAL_CACHE_DIR ?? '';
  if (explicit !== '') return [{ dir: resolve(explicit), from: 'PUNCTUAL_CACHE_DIR' }];
  const out: CacheDirCandidate[] = [];
  // The XDG spec says relative values are invalid and must be ignored; the same goes for HOME here.
  const xdg = env.XDG_CACHE_HOME ?? '';
  if (isAbsolute(xdg)) out.push({ dir: join(xdg, 'punctual'), from: 'XDG_CACHE_HOME' });
  const home = env.HOME ?? '';
  if (isAbsolute(home)) out.push({ dir: join(home, '.cache', 'punctual'), from: 'HOME' });
  out.push({ dir: join(input.tmpDir, `punctual-${input.uid}`), from: 'the temp folder' });
  out.push({ dir: join(dirname(input.execPath), '.punctual-cache'), from: "the executable's folder" });
  return out;
}

/** Why a folder with this owner and mode must not hold code we load, or null when it is fine. */
export function ownershipProblem(dir: string, st: { uid: number; mode: number }, uid: number): string | null {
  if (st.uid !== uid) {
    return `${dir} belongs to uid ${st.uid}, not to this user (uid ${uid}): remove it, or ${fixHint}`;
  }
  if ((st.mode & 0o022) !== 0) {
    const mode = (st.mode & 0o777).toString(8);
    return `${dir} is writable by other users (mode ${mode}): run chmod 700 ${dir}, or ${fixHint}`;
  }
  return null;
}

/** One line for a failed file-system call on `path`, saying what to do. */
export function fsProblem(path: string, err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  switch (code) {
    case 'EACCES':
    case 'EPERM':
      return `cannot write to ${path} (permission denied): give this user write access, or ${fixHint}`;
    case 'EROFS':
      return `${path} is on a read-only filesystem: ${fixHint}`;
    case 'ENOSPC':
    case 'EDQUOT':
      return `no space left for ${path} (the addon needs about 3 MB): free some space, or ${fixHint}`;
    case 'ENOTDIR':
    case 'EEXIST':
      return `${path} (or a parent) is not a folder: remove it, or ${fixHint}`;
    default:
      return `cannot use ${path}: ${err instanceof Error ? err.message : String(err)}: ${fixHint}`;
  }
}

/**
 * Node's recursive mkdir reports ENOENT where the real cause is EROFS (a read-only mount): a plain mkdir of the
 * same path gives the real code when the parent exists.
 */
function realMkdirError(dir: string, err: unknown): unknown {
  if ((err as { code?: unknown }).code !== 'ENOENT') return err;
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (again) {
    return again;
  }
  return err;
}

/** Creates the folder (0700) if needed and checks that it is a folder we own and nobody else can write. */
function prepareDir(dir: string, uid: number): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new CandidateProblem(fsProblem(dir, realMkdirError(dir, err)));
  }
  const st = statSync(dir);
  if (!st.isDirectory()) throw new CandidateProblem(fsProblem(dir, Object.assign(new Error(''), { code: 'ENOTDIR' })));
  const problem = ownershipProblem(dir, st, uid);
  if (problem !== null) throw new CandidateProblem(problem);
}

function sha256Of(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** The file's path, after writing it when it is missing or its content is not the expected one. */
function ensureFile(dir: string, file: CacheFile): string {
  const path = join(dir, file.name);
  try {
    if (sha256Of(readFileSync(path)) === file.sha256) return path;
  } catch {
    // missing (the usual first start) or unreadable: written below
  }
  const tmp = join(dir, `.${file.name}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    writeFileSync(tmp, file.bytes(), { mode: 0o700, flag: 'wx' });
    renameSync(tmp, path); // atomic: a concurrent start sees the old file or the whole new one
  } catch (err) {
    try {
      unlinkSync(tmp);
    } catch {
      // never created
    }
    throw new CandidateProblem(fsProblem(path, err));
  }
  return path;
}

/** Writes (or verifies) every file into `<candidate>/<cacheKey>/` and returns that folder. */
function unpackInto(candidate: CacheDirCandidate, cacheKey: string, files: readonly CacheFile[], uid: number): string {
  prepareDir(candidate.dir, uid);
  const keyDir = join(candidate.dir, cacheKey);
  prepareDir(keyDir, uid);
  for (const file of files) ensureFile(keyDir, file);
  return keyDir;
}

/**
 * dlopen()s an addon. A noexec mount is a candidate problem (the next folder may work); anything else (a glibc
 * that is too old, a damaged file) would fail the same way everywhere, so it ends the search.
 */
export function dlopenAddon(path: string, glibcFloor: string): object {
  const module = { exports: {} as object };
  try {
    process.dlopen(module, path);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    if (/failed to map segment|operation not permitted/i.test(message)) {
      throw new CandidateProblem(`${dirname(path)} is on a filesystem mounted noexec, where code cannot be loaded: ${fixHint}`);
    }
    if (/GLIBC_[0-9.]+' not found/.test(message)) {
      throw new AddonCacheError(
        `this system's C library is older than glibc ${glibcFloor}, which this build of punctual needs ` +
          `(${message.split('\n')[0]}): run punctual on a newer system, or use the container image`,
      );
    }
    throw new AddonCacheError(`cannot load the SQLite addon ${path}: ${message.split('\n')[0]}`);
  }
  return module.exports;
}

/** A problem without the common hint, for the one-line list of every candidate's problem. */
function withoutHint(message: string): string {
  return message.replace(`, or ${fixHint}`, '').replace(`: ${fixHint}`, '');
}

export interface UnpackedAddon {
  /** The folder holding the unpacked files. */
  dir: string;
  /** The loaded addon (what better-sqlite3 takes as `nativeBinding`). */
  addon: object;
  from: string;
}

/**
 * Unpacks the files into the first candidate that works and loads `addonName` from there. Throws
 * AddonCacheError, one line: the single problem when PUNCTUAL_CACHE_DIR is set, else every candidate's.
 */
export function unpackAndLoad(input: {
  candidates: readonly CacheDirCandidate[];
  cacheKey: string;
  files: readonly CacheFile[];
  addonName: string;
  uid: number;
  glibcFloor: string;
}): UnpackedAddon {
  const problems: string[] = [];
  for (const candidate of input.candidates) {
    try {
      const dir = unpackInto(candidate, input.cacheKey, input.files, input.uid);
      const addon = dlopenAddon(join(dir, input.addonName), input.glibcFloor);
      return { dir, addon, from: candidate.from };
    } catch (err) {
      if (!(err instanceof CandidateProblem)) throw err;
      problems.push(input.candidates.length === 1 ? err.message : `${candidate.from}: ${withoutHint(err.message)}`);
    }
  }
  if (problems.length === 1) throw new AddonCacheError(`cannot unpack the SQLite addon: ${problems[0]}`);
  throw new AddonCacheError(
    `no folder to unpack the SQLite addon into (${problems.join('; ')}); ${fixHint}`,
  );
}
