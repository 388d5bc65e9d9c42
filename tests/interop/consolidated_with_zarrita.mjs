// Opens a Zarr v3 hierarchy through its inline consolidated metadata with
// zarrita (withConsolidatedMetadata, format "v3") and prints what it sees as
// one JSON line: {"contents": [[path, kind], ...] sorted, "a": the values of
// /a, "g": the attributes of /g}. The caller removes every zarr.json below
// the root first, so that only the consolidated copy can answer.
//
//   node consolidated_with_zarrita.mjs <store dir>
import FileSystemStore from "@zarrita/storage/fs";
import * as zarr from "zarrita";

const store = await zarr.withConsolidatedMetadata(new FileSystemStore(process.argv[2]), { format: "v3" });
const contents = store.contents().map((c) => [c.path, c.kind]).sort();
const root = zarr.root(store);
const a = await zarr.open(root.resolve("a"), { kind: "array" });
const values = Array.from((await zarr.get(a)).data);
const g = await zarr.open(root.resolve("g"), { kind: "group" });
console.log(JSON.stringify({ contents, a: values, g: g.attrs }));
