// The page's approximate index (web/js/nearest.js) over vectors written by
// nearest_recall.py: reads <dir>/meta.json, rank.i8, scale.f32 and queries.f64, answers
// the top `k` row numbers of each query on stdout (JSON), and the median ms per query.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir, module] = process.argv.slice(2);
const { NearestVectors } = await import(pathToFileURL(module).href);
const meta = JSON.parse(readFileSync(join(dir, "meta.json"), "utf8"));
const buf = (name) => { const b = readFileSync(join(dir, name)); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); };
const rank = new Int8Array(buf("rank.i8"));
const scale = new Float32Array(buf("scale.f32"));
const queries = new Float64Array(buf("queries.f64"));
const { n, dim, k, candidates } = meta;
const vectors = new NearestVectors(dim);
const width = String(n).length;
for (let r = 0; r < n; r++) {
  vectors.add(r, String(r).padStart(width, "0"), r, rank.subarray(r * dim, (r + 1) * dim), scale[r], null, null);
}
const out = [];
const ms = [];
for (let i = 0; i * dim < queries.length; i++) {
  const q = queries.subarray(i * dim, (i + 1) * dim);
  const t = performance.now();
  const [ids] = vectors.nearest(q, k, candidates);
  ms.push(performance.now() - t);
  out.push(ids.map(Number));
}
ms.sort((a, b) => a - b);
process.stdout.write(JSON.stringify({ top: out, p50_ms: ms[Math.floor(ms.length / 2)] }));
