// zarrita (JavaScript) reads Zarr v3 arrays through zarrcoro-server over
// HTTP with @zarrita/storage's FetchStore, and compares every element.
//
//   node read_zarrita_http.mjs <base url> <manifest.json>
//
// The manifest (written by tests/test_server.cpp):
//   { "arrays": [ { "path": "v3/ints", "shape": [7, 5], "expected": [...] } ] }
// `expected` is the whole array, flat, C order, as JSON numbers (exact for the
// integer and float64 types the test uses).
//
// Run from a directory whose node_modules holds zarrita (the test links
// tests/interop/node_modules). Output: `ok <path>` or `FAIL <path>: <why>`
// per array; exit status 0 when all match, 1 otherwise, 2 on bad usage.
import * as fs from "node:fs/promises";

import { FetchStore } from "@zarrita/storage";
import * as zarr from "zarrita";

if (process.argv.length !== 4) {
  console.error("usage: node read_zarrita_http.mjs <base url> <manifest.json>");
  process.exit(2);
}
const [base, manifestPath] = process.argv.slice(2);
const manifest = JSON.parse(await fs.readFile(manifestPath, "utf8"));
const store = new FetchStore(base);

let failed = 0;
for (const { path, shape, expected } of manifest.arrays) {
  try {
    const arr = await zarr.open.v3(zarr.root(store).resolve(path), { kind: "array" });
    if (JSON.stringify(arr.shape) !== JSON.stringify(shape)) throw new Error(`shape ${arr.shape}, expected ${shape}`);
    const got = await zarr.get(arr, shape.map(() => null));
    const data = Array.from(got.data, (v) => (typeof v === "bigint" ? Number(v) : v));
    if (data.length !== expected.length) throw new Error(`${data.length} elements, expected ${expected.length}`);
    const bad = data.findIndex((v, i) => !Object.is(v, expected[i]));
    if (bad >= 0) throw new Error(`element ${bad} is ${data[bad]}, expected ${expected[bad]}`);
    console.log(`ok ${path}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${path}: ${e.message}`);
  }
}
process.exit(failed ? 1 : 0);
