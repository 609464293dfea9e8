// Stands in for msgpackr's optional native string extractor in the single executable (scripts/build-binary.mjs
// aliases msgpackr-extract here): msgpackr then decodes in JavaScript, and prints nothing at start.
module.exports = null;
