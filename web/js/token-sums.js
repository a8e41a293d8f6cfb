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
