// Reads Zarr v3 arrays written by zarrcoro with zarrita (the JavaScript
// implementation) and compares every element with a manifest.
//
//   node read_with_zarrita.mjs <store dir> <manifest.json>
//
// The manifest (written by tests/test_interop_zarrita.cpp):
//   { "arrays": [ { "path": "int16/gzip", "dtype": "int16", "shape": [7, 5],
//                   "expected": [...], "bits": [...] }, ... ] }
// `expected` is the whole array, flat, C order:
//   bool            true / false
//   (u)int8..32     numbers
//   (u)int64        decimal strings (exact beyond 2^53)
//   float*          numbers, or "NaN" / "Infinity" / "-Infinity"
//   complex*        [re, im] pairs of the float form
//   string          the text (vlen-utf8)
// `bits` (float and complex types) holds each element's IEEE bits as hex
// strings ("0x3c00"; [re, im] pairs for complex): non-NaN floats must match
// bit for bit (so -0 differs from +0); any NaN matches an expected NaN.
//
// Output: one line per array, `ok <path>`, `FAIL <path>: <reason>` or
// `unsupported <path>: <reason>` (zarrita cannot decode that data type or
// codec at all; not counted as a failure), `note: ...` lines, then
// `N passed, M failed, K unsupported`. Exit status: 0 when nothing failed,
// 1 on any failure, 2 on bad usage or an unreadable manifest.

import * as fs from "node:fs/promises";
import * as path from "node:path";

import FileSystemStore from "@zarrita/storage/fs";
import * as zarr from "zarrita";

// Node 20 has no Float16Array (zarrita looks it up on globalThis when an
// array is opened); install the polyfill so float16 arrays can be read.
if (globalThis.Float16Array === undefined) {
  const { Float16Array } = await import("@petamoriken/float16");
  globalThis.Float16Array = Float16Array;
  console.log(`note: Float16Array polyfilled by @petamoriken/float16 (Node ${process.version} has none)`);
}

// zarrita 0.7.5 strips a crc32c checksum without checking it. Register a
// decoder that also verifies it, so a wrong checksum cannot pass unnoticed.
// The codec appends the CRC32C (Castagnoli) of its input, 4 bytes little-endian.
const CRC32C_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

function crc32c(bytes) {
  let crc = 0xffffffff;
  for (const b of bytes) crc = CRC32C_TABLE[(crc ^ b) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

class VerifyingCrc32cCodec {
  kind = "bytes_to_bytes";
  static fromConfig() {
    return new VerifyingCrc32cCodec();
  }
  encode() {
    throw new Error("crc32c: encoding is not needed by this reader");
  }
  decode(bytes) {
    if (bytes.byteLength < 4) throw new Error(`crc32c: chunk of ${bytes.byteLength} bytes has no checksum`);
    const payload = bytes.subarray(0, bytes.byteLength - 4);
    const stored = new DataView(bytes.buffer, bytes.byteOffset + payload.byteLength, 4).getUint32(0, true);
    const computed = crc32c(payload);
    if (stored !== computed) {
      throw new Error(`crc32c mismatch: stored ${hex32(stored)}, computed ${hex32(computed)}`);
    }
    return payload;
  }
  computeEncodedSize(decodedSize) {
    return decodedSize + 4;
  }
}
zarr.registry.set("crc32c", () => VerifyingCrc32cCodec);

function hex32(v) {
  return `0x${v.toString(16).padStart(8, "0")}`;
}

// ---------------------------------------------------------------------------
// Data types: how to read one element of zarrita's output and compare it.

const FLOAT_FORMATS = {
  // size in bytes, exponent mask, mantissa mask (as BigInt over the bits)
  2: { expMask: 0x7c00n, manMask: 0x03ffn },
  4: { expMask: 0x7f800000n, manMask: 0x007fffffn },
  8: { expMask: 0x7ff0000000000000n, manMask: 0x000fffffffffffffn },
};

const DTYPES = {
  bool: { kind: "bool" },
  int8: { kind: "int" },
  int16: { kind: "int" },
  int32: { kind: "int" },
  uint8: { kind: "int" },
  uint16: { kind: "int" },
  uint32: { kind: "int" },
  int64: { kind: "bigint" },
  uint64: { kind: "bigint" },
  float16: { kind: "float", size: 2, components: 1 },
  float32: { kind: "float", size: 4, components: 1 },
  float64: { kind: "float", size: 8, components: 1 },
  complex64: { kind: "float", size: 4, components: 2 },
  complex128: { kind: "float", size: 8, components: 2 },
  string: { kind: "string" },
};

function readBits(view, byteOffset, size) {
  switch (size) {
    case 2:
      return BigInt(view.getUint16(byteOffset, true));
    case 4:
      return BigInt(view.getUint32(byteOffset, true));
    default:
      return view.getBigUint64(byteOffset, true);
  }
}

function isNaNBits(bits, size) {
  const { expMask, manMask } = FLOAT_FORMATS[size];
  return (bits & expMask) === expMask && (bits & manMask) !== 0n;
}

function hexBits(bits, size) {
  return `0x${bits.toString(16).padStart(size * 2, "0")}`;
}

function showNumber(x) {
  return Object.is(x, -0) ? "-0" : String(x);
}

function parseExpectedFloat(v) {
  if (v === "NaN") return NaN;
  if (v === "Infinity") return Infinity;
  if (v === "-Infinity") return -Infinity;
  if (typeof v !== "number") throw new Error(`bad expected float ${JSON.stringify(v)}`);
  return v;
}

// Offsets of zarrita's output elements in C order (its output follows the
// array's native order, so a transposed array comes back with F strides).
function* cOrderOffsets(shape, stride) {
  const n = shape.reduce((a, b) => a * b, 1);
  const index = new Array(shape.length).fill(0);
  for (let i = 0; i < n; i++) {
    yield index.reduce((off, x, d) => off + x * stride[d], 0);
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// Compares one element; returns null when equal, otherwise a description.
function compareElement(dtype, data, view, offset, expected, expectedBits) {
  const info = DTYPES[dtype];
  switch (info.kind) {
    case "bool": {
      const actual = data.get(offset);
      return actual === expected ? null : `got ${actual}, want ${expected}`;
    }
    case "int": {
      const actual = data[offset];
      return actual === expected ? null : `got ${actual}, want ${expected}`;
    }
    case "bigint": {
      const actual = data[offset];
      return actual === BigInt(expected) ? null : `got ${actual}, want ${expected}`;
    }
    case "string": {
      const actual = data[offset];
      return actual === expected ? null : `got ${JSON.stringify(actual)}, want ${JSON.stringify(expected)}`;
    }
    case "float": {
      const parts = info.components === 1 ? [expected] : expected;
      const partBits = info.components === 1 ? [expectedBits] : expectedBits;
      const problems = [];
      parts.forEach((part, c) => {
        const want = parseExpectedFloat(part);
        const byteOffset = (offset * info.components + c) * info.size;
        const got = readBits(view, byteOffset, info.size);
        const component = info.components === 1 ? "" : c === 0 ? "re " : "im ";
        if (Number.isNaN(want)) {
          if (!isNaNBits(got, info.size)) problems.push(`${component}got bits ${hexBits(got, info.size)}, want NaN`);
          return;
        }
        const wantBits = BigInt(partBits[c]);
        if (got !== wantBits) {
          problems.push(
            `${component}got bits ${hexBits(got, info.size)}, want ${hexBits(wantBits, info.size)} (${showNumber(want)})`,
          );
        }
        // zarrita's own view of the element must agree with the value too.
        if (info.components === 1 && !Object.is(data[offset], want)) {
          problems.push(`zarrita value ${showNumber(data[offset])}, want ${showNumber(want)}`);
        }
      });
      return problems.length === 0 ? null : problems.join("; ");
    }
    default:
      throw new Error(`unknown data type ${dtype}`);
  }
}

// ---------------------------------------------------------------------------

class Unsupported extends Error {}

// Errors that mean "zarrita cannot decode this at all" rather than "zarrita
// read something different".
function asUnsupported(err) {
  if (zarr.isZarritaError(err, "UnknownCodecError")) return new Unsupported(err.message);
  if (zarr.isZarritaError(err, "UnsupportedError")) return new Unsupported(err.message);
  if (zarr.isZarritaError(err, "InvalidMetadataError") && /unsupported dataType/i.test(err.message)) {
    return new Unsupported(err.message);
  }
  return err;
}

function describeError(err) {
  let text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  for (let cause = err?.cause; cause; cause = cause.cause) {
    text += ` (caused by ${cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause)})`;
  }
  return text;
}

async function checkArray(store, entry) {
  const { path: arrayPath, dtype, shape, expected, bits } = entry;
  if (!(dtype in DTYPES)) throw new Error(`manifest names unknown data type ${dtype}`);

  let arr;
  let result;
  try {
    // Pinned to v3: auto-detection would hide a v3 error behind "v2 array not found".
    arr = await zarr.open.v3(zarr.root(store).resolve(arrayPath), { kind: "array" });
    result = await zarr.get(arr, shape.map(() => null));
  } catch (err) {
    throw asUnsupported(err);
  }

  if (arr.dtype !== dtype) throw new Error(`data type ${arr.dtype}, want ${dtype}`);
  if (JSON.stringify(arr.shape) !== JSON.stringify(shape)) {
    throw new Error(`array shape ${JSON.stringify(arr.shape)}, want ${JSON.stringify(shape)}`);
  }
  if (JSON.stringify(result.shape) !== JSON.stringify(shape)) {
    throw new Error(`result shape ${JSON.stringify(result.shape)}, want ${JSON.stringify(shape)}`);
  }
  const count = shape.reduce((a, b) => a * b, 1);
  if (expected.length !== count) throw new Error(`manifest lists ${expected.length} values for ${count} elements`);

  const { data, stride } = result;
  // Floats are compared by their bits, read from the output's buffer.
  const view = DTYPES[dtype].kind === "float" ? new DataView(data.buffer, data.byteOffset, data.byteLength) : null;
  const mismatches = [];
  let i = 0;
  for (const offset of cOrderOffsets(shape, stride)) {
    const problem = compareElement(dtype, data, view, offset, expected[i], bits?.[i]);
    if (problem) mismatches.push(`[${i}] ${problem}`);
    i++;
  }
  if (mismatches.length > 0) {
    const shown = mismatches.slice(0, 5).join(", ");
    const more = mismatches.length > 5 ? `, ... (${mismatches.length - 5} more)` : "";
    throw new Error(`${mismatches.length} of ${count} elements differ: ${shown}${more}`);
  }
}

async function main(argv) {
  if (argv.length !== 2) {
    console.error("usage: node read_with_zarrita.mjs <store dir> <manifest.json>");
    return 2;
  }
  const [storeDir, manifestPath] = argv;
  let manifest;
  try {
    manifest = JSON.parse(await fs.readFile(manifestPath, "utf8"));
  } catch (err) {
    console.error(`cannot read manifest ${manifestPath}: ${describeError(err)}`);
    return 2;
  }
  const store = new FileSystemStore(path.resolve(storeDir));

  let passed = 0;
  let failed = 0;
  let unsupported = 0;
  for (const entry of manifest.arrays) {
    try {
      await checkArray(store, entry);
      console.log(`ok ${entry.path}`);
      passed++;
    } catch (err) {
      if (err instanceof Unsupported) {
        console.log(`unsupported ${entry.path}: ${err.message}`);
        unsupported++;
      } else {
        console.log(`FAIL ${entry.path}: ${describeError(err)}`);
        failed++;
      }
    }
  }
  console.log(`${passed} passed, ${failed} failed, ${unsupported} unsupported`);
  return failed === 0 ? 0 : 1;
}

process.exitCode = await main(process.argv.slice(2));
