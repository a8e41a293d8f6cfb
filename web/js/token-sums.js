// The static embedding model's arithmetic, in JS (chatmem/embedding/static.py holds the
// model and the Python version of the same sums). A text's vector is the weighted sum of
// its tokens' int8 rows; here every product (< 2^27) and every sum (< 2^37, at most 512
// tokens) is an exact integer in a float64, so the sums are the same integers as Python's
// big-integer ones, and the page's vectors stay bit-for-bit CPython's, about 40 times faster
// than that arithmetic in Pyodide.

/** A summer over one model: `table` the int8 rows (vocab x dim bytes), `weights` each
 *  token's integer weight. Both are copied. The summer takes every text's token ids in one
 *  Int32Array (`offsets`: n + 1 starts) and returns n rows of dim + 1 numbers: the sums of
 *  weight x value per dimension, then the sum of the weights. */
export function tokenSums(table, dim, weights) {
  const rows = new Int8Array(table.buffer.slice(table.byteOffset, table.byteOffset + table.byteLength));
  const w = Int32Array.from(weights);
  return (ids, offsets) => {
    const n = offsets.length - 1;
    const width = dim + 1;
    const out = new Float64Array(n * width);
    for (let t = 0; t < n; t++) {
      const base = t * width;
      let wsum = 0;
      for (let k = offsets[t]; k < offsets[t + 1]; k++) {
        const id = ids[k];
        const wt = w[id];
        if (!wt) continue;
        wsum += wt;
        const r = id * dim;
        for (let d = 0; d < dim; d++) out[base + d] += wt * rows[r + d];
      }
      out[base + dim] = wsum;
    }
    return out;
  };
}

// A typed array that owns its whole buffer can be moved to a worker; one that views a larger
// buffer (Pyodide's memory, say) is copied instead.
function movable(a) {
  return a.byteOffset === 0 && a.byteLength === a.buffer.byteLength ? [a.buffer] : [];
}

/** The same sums in a worker of their own (token-sums-worker.js): the main thread sends the
 *  table in pieces (`part(bytes)`, then `init(dim, weights)`), then `sums(ids, offsets)`
 *  resolves to what `tokenSums` returns. `close()` ends the worker. */
export function tokenSumsWorker() {
  const worker = new Worker(new URL("./token-sums-worker.js", import.meta.url), { type: "module" });
  const waiting = new Map();
  let next = 0;
  let failed = null;
  const settle = (id, fn) => {
    const w = waiting.get(id);
    waiting.delete(id);
    if (w) fn(w);
  };
  worker.onmessage = (e) => {
    const { id, out, error } = e.data;
    settle(id, (w) => (error ? w.reject(new Error(error)) : w.resolve(out)));
  };
  worker.onerror = (e) => {
    e.preventDefault?.();
    failed = new Error(`the token sums worker failed: ${e.message || "it could not start"}`);
    for (const w of waiting.values()) w.reject(failed);
    waiting.clear();
  };
  return {
    part(bytes) {
      worker.postMessage({ kind: "part", bytes }, movable(bytes));
    },
    init(dim, weights) {
      worker.postMessage({ kind: "init", dim, weights }, movable(weights));
    },
    sums(ids, offsets) {
      if (failed) return Promise.reject(failed);
      const id = ++next;
      return new Promise((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        worker.postMessage({ kind: "sums", id, ids, offsets }, [...movable(ids), ...movable(offsets)]);
      });
    },
    close() {
      worker.terminate();
    },
  };
}
