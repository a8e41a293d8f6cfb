// The query index's engine: one DuckDB-Wasm database (the `eh` build) in a
// worker. Extensions are never autoloaded (they would reach the internet).
// Results cross as JSON {columns, rows} in the envelope of envelope.js; bulk
// loads go through Arrow. The index is derived: IndexedDB stays the truth.

import { BridgeError, callMethod, opened } from "./envelope.js";
import { tryLock } from "./locks.js";

const ENGINE_METHODS = new Set(["execute", "executemany", "loadRows", "close"]);

const here = (path) => new URL(path, import.meta.url).href;

function plain(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "bigint") return Number(v);
  if (v instanceof Date) return v.getTime();
  if (typeof v === "object" && typeof v.toArray === "function") return Array.from(v.toArray(), plain);
  if (ArrayBuffer.isView(v)) return Array.from(v, plain);
  return v;
}

// HUGEINT / DECIMAL results arrive as 32-bit words (little-endian, two's complement)
function decimal(words, scale) {
  if (words === null || words === undefined) return null;
  let x = 0n;
  for (let i = words.length - 1; i >= 0; i--) x = (x << 32n) | BigInt(words[i] >>> 0);
  if (words[words.length - 1] & 0x80000000) x -= 1n << BigInt(32 * words.length);
  return Number(x) / 10 ** scale;
}

function resultJSON(table) {
  const fields = table.schema.fields;
  const columns = fields.map((f) => f.name);
  const vectors = columns.map((_, i) => table.getChildAt(i));
  const convert = fields.map((f) => (f.type.typeId === 7 /* Decimal */ ? (v) => decimal(v, f.type.scale) : plain));
  const rows = new Array(table.numRows);
  for (let r = 0; r < table.numRows; r++) {
    const row = new Array(columns.length);
    for (let c = 0; c < columns.length; c++) row[c] = convert[c](vectors[c].get(r));
    rows[r] = row;
  }
  return { columns, rows };
}

function arrowColumn(arrow, values) {
  const sample = values.find((v) => v !== null && v !== undefined);
  let type;
  if (typeof sample === "boolean") type = new arrow.Bool();
  else if (typeof sample === "number") type = new arrow.Float64();
  else if (Array.isArray(sample)) {
    const inner = values.flat().find((v) => v !== null && v !== undefined);
    const child = typeof inner === "number" ? new arrow.Float64() : new arrow.Utf8();
    type = new arrow.List(new arrow.Field("item", child, true));
  } else type = new arrow.Utf8();
  return arrow.vectorFromArray(values, type);
}

class Duck {
  constructor(duckdb, arrow, db, conn) {
    this.duckdb = duckdb;
    this.arrow = arrow;
    this.db = db;
    this.conn = conn;
    this.statements = new Map();
    this.closed = false;
    this.tmp = 0;
    this.release = null; // the Web Lock on the cache file, when there is one
  }

  async statement(sql) {
    let st = this.statements.get(sql);
    if (!st) {
      st = await this.conn.prepare(sql);
      this.statements.set(sql, st);
      if (this.statements.size > 256) {
        const [oldSql, old] = this.statements.entries().next().value;
        this.statements.delete(oldSql);
        await old.close();
      }
    }
    return st;
  }

  async execute({ sql, params }) {
    const table = params && params.length ? await (await this.statement(sql)).query(...params) : await this.conn.query(sql);
    return resultJSON(table);
  }

  async executemany({ sql, rows }) {
    const st = await this.statement(sql);
    for (const row of rows) await st.query(...row);
    return null;
  }

  // `cols` (one array per column) is the compact form Python sends; `rows` (arrays) also works
  async loadRows({ table, columns, rows, cols: data }) {
    data = data || columns.map((_, i) => rows.map((r) => r[i]));
    if (!data.length || !data[0].length) return null;
    const cols = {};
    columns.forEach((name, i) => (cols[name] = arrowColumn(this.arrow, data[i])));
    const tmp = `__chatmem_load_${++this.tmp}`;
    await this.conn.insertArrowTable(new this.arrow.Table(cols), { name: tmp, create: true });
    const list = columns.map((c) => `"${c}"`).join(", ");
    try {
      await this.conn.query(`INSERT INTO "${table}" (${list}) SELECT ${list} FROM "${tmp}"`);
    } finally {
      await this.conn.query(`DROP TABLE IF EXISTS "${tmp}"`);
    }
    return null;
  }

  async close() {
    if (this.closed) return null;
    this.closed = true;
    try {
      for (const st of this.statements.values()) await st.close();
      await this.conn.close();
      await this.db.terminate();
    } finally {
      this.release?.(); // the cache file is free for the next tab
    }
    return null;
  }

  call(method, argsJson) {
    return callMethod(this, ENGINE_METHODS, method, argsJson, () => {
      if (this.closed) throw new BridgeError("DatabaseClosed", "the query index is closed");
    });
  }
}

/** Ms to wait between tries at a cache file no live tab holds (its last holder is going away). */
const REOPEN_WAITS_MS = [100, 200, 300, 500, 500, 800, 1000, 1500];

/**
 * Start DuckDB-Wasm from this site (no network): resolves to an engine handle.
 * `path` null: an in-memory database; `opfs://name.duckdb`: a database file in
 * the origin's private file system. One tab at a time holds it, under a Web
 * Lock named after the file: while another live tab holds that lock, the open
 * rejects at once with `{name: "IndexLocked"}` and starts no worker. When no
 * tab holds the lock but the file still refuses (the page that held it is
 * being torn down, e.g. by a reload), the open is retried for a few seconds
 * before it gives up with `IndexLocked` too.
 */
export async function duckdbOpen(path = null) {
  const duckdb = await import("@duckdb/duckdb-wasm");
  const arrow = await import("apache-arrow");
  if (!path) return start(duckdb, arrow, null);
  const release = await tryLock(`chatmem-index:${path}`);
  if (!release) throw new BridgeError("IndexLocked", `${path}: held by another tab`);
  for (let i = 0; ; i++) {
    try {
      const duck = await start(duckdb, arrow, path);
      duck.release = release;
      return duck;
    } catch (e) {
      if (i >= REOPEN_WAITS_MS.length) {
        release();
        throw e;
      }
      await new Promise((resolve) => setTimeout(resolve, REOPEN_WAITS_MS[i]));
    }
  }
}

async function start(duckdb, arrow, path) {
  const worker = new Worker(here("../duckdb/duckdb-browser-eh.worker.js"));
  const db = new duckdb.AsyncDuckDB(new duckdb.VoidLogger(), worker);
  await db.instantiate(here("../duckdb/duckdb-eh.wasm"));
  let conn;
  try {
    if (path) await db.open({ path, accessMode: duckdb.DuckDBAccessMode.READ_WRITE });
    conn = await db.connect();
    await conn.query("SET autoload_known_extensions=false");
    await conn.query("SET autoinstall_known_extensions=false");
    if (path) await conn.query("SELECT count(*) FROM duckdb_tables()"); // touch the file: fail here, not later
  } catch (e) {
    try { await db.terminate(); } catch (_) { /* already gone */ }
    throw new BridgeError(path ? "IndexLocked" : "Error", `${path || "duckdb"}: ${e?.message || e}`);
  }
  const duck = new Duck(duckdb, arrow, db, conn);
  duck.path = path;
  return duck;
}

/** `duckdbOpen` as an envelope (never rejects): {ok, value: engine, error: JSON text} (for Python). */
export function duckdbOpenEnvelope(path = null) {
  return opened(duckdbOpen(path));
}

/** Remove an OPFS file (a cached index); true when it existed. */
export async function opfsRemove(name) {
  const root = await navigator.storage.getDirectory();
  let found = false;
  for (const n of [name, `${name}.wal`]) {
    try { await root.removeEntry(n); found = found || n === name; } catch (_) { /* absent */ }
  }
  return found;
}
