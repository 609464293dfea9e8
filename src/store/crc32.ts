/**
 * CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), table-driven: one table lookup per byte.
 * Every log entry carries the CRC of its bytes, so a torn or corrupted entry is detected when it is read
 * instead of being applied.
 */
const table = buildTable();

function buildTable(): Uint32Array {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
}

/** CRC-32 of bytes, continuing from `previous` (0 to start), as an unsigned 32-bit integer. */
export function crc32(bytes: Uint8Array, previous = 0): number {
  let c = (previous ^ 0xffffffff) >>> 0;
  for (let i = 0; i < bytes.length; i++) c = table[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
