/**
 * Entry point of the `punctual` single executable (bundled by scripts/build-binary.mjs; punctual.ts only
 * runs itself when it is the script node was given, which a bundle never is). Before `serve` it unpacks and
 * loads the SQLite addon, so a cache problem is one line `punctual: ...` and exit 1 before anything starts.
 */
import { AddonCacheError } from '../src/platform/addon-cache.js';
import { seaSqlite } from '../src/platform/sqlite.js';
import { exitCodes, type CliIo } from './io.js';
import { run } from './punctual.js';

const io: CliIo = {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  exit: (code) => process.exit(code),
};

// In a single executable argv is [executable, executable, ...user arguments].
const argv = process.argv.slice(2);
let ok = true;
if (argv[0] === 'serve' && !argv.includes('--help') && !argv.includes('-h') && !argv.includes('--check-config')) {
  try {
    seaSqlite(io.env);
  } catch (err) {
    if (!(err instanceof AddonCacheError)) throw err;
    io.stderr.write(`punctual: ${err.message}\n`);
    ok = false;
    io.exit(exitCodes.runtime);
  }
}
if (ok) void run(argv, io);
