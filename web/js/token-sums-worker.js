// The static embedding model's token sums in a worker of their own (token-sums.js
// `tokenSumsWorker` drives it), so that the page's main thread only tokenises. Messages:
// {kind: "part", bytes} appends a piece of the int8 table; {kind: "init", dim, weights}
// builds the summer from the pieces; {kind: "sums", id, ids, offsets} answers {id, out}
// (the Float64Array of tokenSums, transferred) or {id, error}.

import { tokenSums } from "./token-sums.js";

let parts = [];
let summer = null;

function table() {
  const total = parts.reduce((n, p) => n + p.byteLength, 0);
  const rows = new Int8Array(total);
  let at = 0;
  for (const p of parts) {
    rows.set(new Int8Array(p.buffer, p.byteOffset, p.byteLength), at);
    at += p.byteLength;
  }
  parts = [];
  return rows;
}

self.onmessage = (e) => {
  const m = e.data;
  if (m.kind === "part") parts.push(m.bytes);
  else if (m.kind === "init") summer = tokenSums(table(), m.dim, m.weights);
  else if (m.kind === "sums") {
    try {
      if (!summer) throw new Error("the token sums worker has no model yet");
      const out = summer(m.ids, m.offsets);
      self.postMessage({ id: m.id, out }, [out.buffer]);
    } catch (err) {
      self.postMessage({ id: m.id, error: String(err?.message || err) });
    }
  }
};
