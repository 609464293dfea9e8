// The `bindings` package in better-sqlite3.cjs, the copy of better-sqlite3 unpacked beside the addon for
// worker threads (scripts/build-binary.mjs): the addon is the file next to this bundle.
const { join } = require('node:path');
module.exports = function bindings(name) {
  return require(join(__dirname, name));
};
