// The `bindings` package in the single executable's main bundle (aliased by scripts/build-binary.mjs).
// better-sqlite3 only calls it when no nativeBinding was passed: in the executable that is a bug, say so
// instead of searching the disk for a node_modules that is not there.
module.exports = function bindings(name) {
  throw new Error(
    `punctual: internal error: better-sqlite3 asked for ${name} without a nativeBinding ` +
      '(open databases with sqliteOpenOptions() from src/platform/sqlite.ts)',
  );
};
