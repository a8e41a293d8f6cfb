// Arrow vectors and tables of the columns Python and the derivation load in bulk
// (`Duck.loadRows`, `Duck.appendRows`): numbers, lists of numbers and strings laid out
// straight into typed arrays; anything else through apache-arrow's generic builder.
// `arrow` is apache-arrow's module, given by the caller (query-engine.js imports it with
// DuckDB-Wasm's, after the page's first paint).

// One column of loadRows as an Arrow vector. Numbers, lists of numbers and strings are
// laid out straight into typed arrays (apache-arrow's generic builder costs about a
// microsecond a value: a batch of 64 embeddings, 49,152 values, held the main thread
// ~40 ms); anything else (booleans, mixed values) goes through that builder.
function arrowColumn(arrow, values) {
  if (values instanceof Int32Array) return arrow.makeVector(values);  // a derivation's integer columns
  const sample = values.find((v) => v !== null && v !== undefined);
  if (typeof sample === "number") return numberColumn(arrow, values) || arrow.vectorFromArray(values, new arrow.Float64());
  if (typeof sample === "string") return stringColumn(arrow, values) || arrow.vectorFromArray(values, new arrow.Utf8());
  if (Array.isArray(sample)) {
    const fast = numberListColumn(arrow, values);
    if (fast) return fast;
    const inner = values.flat().find((v) => v !== null && v !== undefined);
    const child = typeof inner === "number" ? new arrow.Float64() : new arrow.Utf8();
    return arrow.vectorFromArray(values, new arrow.List(new arrow.Field("item", child, true)));
  }
  if (typeof sample === "boolean") return arrow.vectorFromArray(values, new arrow.Bool());
  return arrow.vectorFromArray(values, new arrow.Utf8());
}

// An Arrow table of the named columns, one array of values (or Int32Array) per column.
export function arrowTable(arrow, columns, cols) {
  const data = {};
  columns.forEach((name, i) => (data[name] = arrowColumn(arrow, cols[i])));
  return new arrow.Table(data);
}

/** Rows of a sliced table's record batch: about a megabyte of text each, so that building
 *  one stays far below a 50 ms task (a 20,000-message chunk built at once held the main
 *  thread 50-110 ms). */
export const SLICE_ROWS = 2048;

/** `arrowTable` built a slice of `rows` rows at a time (one record batch each), awaiting
 *  `pause()` between two slices so the page runs meanwhile. */
export async function arrowTableInSlices(arrow, columns, cols, pause, rows = SLICE_ROWS) {
  const n = cols.length ? cols[0].length : 0;
  if (n <= rows) return arrowTable(arrow, columns, cols);
  const batches = [];
  for (let at = 0; at < n; at += rows) {
    if (at) await pause();
    const end = Math.min(at + rows, n);
    // a typed array's slice is a view (its values are copied once, into the IPC bytes)
    const part = cols.map((c) => (ArrayBuffer.isView(c) ? c.subarray(at, end) : c.slice(at, end)));
    batches.push(...arrowTable(arrow, columns, part).batches);
  }
  return new arrow.Table(batches);
}

// The validity bitmap of `values` (bit i set: values[i] is not null), or null when none is.
function validity(values) {
  const n = values.length;
  let bitmap = null;
  let nulls = 0;
  for (let i = 0; i < n; i++) {
    if (values[i] === null || values[i] === undefined) {
      if (!bitmap) bitmap = new Uint8Array((n + 7) >> 3).fill(0xff);
      bitmap[i >> 3] &= ~(1 << (i & 7));
      nulls++;
    }
  }
  return { bitmap, nulls };
}

function withNulls(arrow, props, values) {
  const { bitmap, nulls } = validity(values);
  return arrow.makeVector(arrow.makeData({ ...props, length: values.length, nullCount: nulls,
    ...(bitmap ? { nullBitmap: bitmap } : {}) }));
}

// Float64 from numbers and nulls; null if any other value is in the column.
function numberColumn(arrow, values) {
  const data = new Float64Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (typeof v === "number") data[i] = v;
    else if (v !== null && v !== undefined) return null;
  }
  return withNulls(arrow, { type: new arrow.Float64(), data }, values);
}

// List<Float64> from arrays of numbers and nulls (null lists, null items); null if anything
// else is in the column.
function numberListColumn(arrow, values) {
  const n = values.length;
  const offsets = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v !== null && v !== undefined && !Array.isArray(v)) return null;
    offsets[i + 1] = offsets[i] + (v ? v.length : 0);
  }
  const flat = new Float64Array(offsets[n]);
  let itemBitmap = null;
  let itemNulls = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (!v) continue;
    for (let j = 0, k = offsets[i]; j < v.length; j++, k++) {
      const x = v[j];
      if (typeof x === "number") flat[k] = x;
      else if (x === null || x === undefined) {
        if (!itemBitmap) itemBitmap = new Uint8Array((flat.length + 7) >> 3).fill(0xff);
        itemBitmap[k >> 3] &= ~(1 << (k & 7));
        itemNulls++;
      } else return null;
    }
  }
  const item = new arrow.Float64();
  const child = arrow.makeData({ type: item, length: flat.length, nullCount: itemNulls, data: flat,
    ...(itemBitmap ? { nullBitmap: itemBitmap } : {}) });
  return withNulls(arrow, { type: new arrow.List(new arrow.Field("item", item, true)), valueOffsets: offsets, child },
    values);
}

const utf8 = new TextEncoder();

// Utf8 from strings and nulls, encoded into one buffer; null if anything else is in the column.
// The column is encoded in one call (a call a value cost about a microsecond each: 0.6 s of
// the main thread in a 100,000-message derivation): when every character is ASCII, as in
// ids, roles and most chunks of text, the byte offsets are the character offsets; else they
// are read off the bytes (`byteOffsets`), or each value is encoded alone.
function stringColumn(arrow, values) {
  const n = values.length;
  const offsets = new Int32Array(n + 1);
  let chars = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (typeof v === "string") chars += v.length;
    else if (v !== null && v !== undefined) return null;
    offsets[i + 1] = chars;
  }
  const text = values.join("");  // null and undefined join as ""
  let buf = new Uint8Array(chars);
  if (utf8.encodeInto(text, buf).read < text.length) {  // not all ASCII: at most 3 bytes a unit
    const room = new Uint8Array(chars * 3);
    buf = room.slice(0, utf8.encodeInto(text, room).written);  // not holding 3 bytes a unit
    if (!byteOffsets(buf, offsets)) return eachEncoded(arrow, values);
  }
  return withNulls(arrow, { type: new arrow.Utf8(), valueOffsets: offsets, data: buf }, values);
}

// `offsets` (in UTF-16 units of the joined values) made byte offsets into `bytes`, their
// UTF-8; false when a 4-byte character spans two values (one ends with a lone high
// surrogate, the next starts with a lone low one: joined, they became one character).
function byteOffsets(bytes, offsets) {
  let at = 0;
  let units = 0;
  for (let i = 1; i < offsets.length; i++) {
    const end = offsets[i];
    while (units < end) {
      const b = bytes[at];
      if (b < 0x80) { at += 1; units += 1; } else if (b < 0xe0) { at += 2; units += 1; } else if (b < 0xf0) {
        at += 3;
        units += 1;
      } else {
        if (units + 2 > end) return false;
        at += 4;
        units += 2;
      }
    }
    offsets[i] = at;
  }
  return true;
}

// `stringColumn` with each value encoded alone (every value a string or null).
function eachEncoded(arrow, values) {
  const n = values.length;
  const offsets = new Int32Array(n + 1);
  let chars = 0;
  for (let i = 0; i < n; i++) if (typeof values[i] === "string") chars += values[i].length;
  let buf = new Uint8Array(chars + (chars >> 2) + 16);
  let at = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (typeof v === "string" && v.length) {
      let done = utf8.encodeInto(v, buf.subarray(at));
      if (done.read < v.length) {  // out of room: grow (3 bytes a UTF-16 unit at most), encode again
        const grown = new Uint8Array(Math.max(buf.length * 2, at + v.length * 3));
        grown.set(buf.subarray(0, at));
        buf = grown;
        done = utf8.encodeInto(v, buf.subarray(at));
      }
      at += done.written;
    }
    offsets[i + 1] = at;
  }
  return withNulls(arrow, { type: new arrow.Utf8(), valueOffsets: offsets, data: buf.subarray(0, at) }, values);
}
