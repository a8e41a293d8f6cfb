// The query index's engine: one DuckDB-Wasm database (the `eh` build) in a
// worker. Extensions are never autoloaded (they would reach the internet).
// Results cross as column-major JSON {columns, cols} in the envelope of envelope.js; bulk
// loads go through Arrow. The index is derived: IndexedDB stays the truth.

import { arrowTable, arrowTableInSlices } from "./arrow-columns.js";
import { yieldToPage } from "./page-yield.js";
import { BridgeError, callMethod, opened } from "./envelope.js";
import { NearestVectors, mayRewriteEmbeddings } from "./nearest.js";

const ENGINE_METHODS = new Set(["execute", "executeReadOnly", "executemany", "loadRows", "nearest", "close", "cancel"]);

// a read of vectors gives the thread back after this many milliseconds of work
const SLICE_MS = 25;

const here = (path) => new URL(path, import.meta.url).href;

function plain(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "bigint") return Number(v);
  if (v instanceof Date) return v.getTime();
  if (typeof v === "object" && typeof v.toArray === "function") {
    // a list's items: toArray() is the raw buffer, whose null slots hold whatever was there
    if (v.nullCount) return Array.from({ length: v.length }, (_, i) => plain(v.get(i)));
    return Array.from(v.toArray(), plain);
  }
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

// Arrow type ids (apache-arrow's `Type` enum)
const INT = 2, FLOAT = 3, DECIMAL = 7;

// One column's values as plain JS values: a whole typed array at once for a number
// column without nulls, else cell by cell.
function columnValues(vector, field) {
  const n = vector.length;
  const t = field.type.typeId;
  if ((t === INT || (t === FLOAT && field.type.precision > 0)) && !vector.nullCount) {
    const arr = vector.toArray();
    return typeof arr[0] === "bigint" ? Array.from(arr, Number) : Array.from(arr);
  }
  const convert = t === DECIMAL ? (v) => decimal(v, field.type.scale) : plain;
  const out = new Array(n);
  for (let r = 0; r < n; r++) out[r] = convert(vector.get(r));
  return out;
}

// Column-major: {columns, cols: one array of values per column}
function resultJSON(table) {
  const fields = table.schema.fields;
  return { columns: fields.map((f) => f.name), cols: fields.map((f, i) => columnValues(table.getChildAt(i), f)) };
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
    // what the vectors kept for `nearest` are kept in step by: loads appended to
    // `embeddings`, and any other write that may have changed it (or a rollback)
    this.embeddingsAppended = 0;
    this.embeddingsRewritten = 0;
    this.nearestSets = new Map(); // "modelKey:dim" -> NearestVectors
    this.nearestEpoch = 0;
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

  async execute({ sql, params, interruptible }) {
    if (!mayRewriteEmbeddings(sql)) return this._execute(sql, params, interruptible);
    let out;
    try {
      out = await this._execute(sql, params, interruptible);
    } catch (e) {
      this.embeddingsRewritten++;
      throw e;
    }
    // a DELETE or UPDATE that changed no row (DuckDB answers its `Count`) left the table as it was
    if (!(out.columns.length === 1 && out.columns[0] === "Count" && Number(out.cols[0][0]) === 0)) {
      this.embeddingsRewritten++;
    }
    return out;
  }

  async _execute(sql, params, interruptible) {
    if (interruptible) return this.interruptible(sql, params);
    const table = params && params.length ? await (await this.statement(sql)).query(...params) : await this.conn.query(sql);
    return resultJSON(table);
  }

  // A user's query: sent as a pending query that `cancel()` can interrupt between
  // steps (the worker polls it), so a cancelled or timed-out query stops and
  // frees the engine. Parameters are bound by a prepared statement.
  async interruptible(sql, params) {
    this.cancelled = false;
    const reader = params && params.length
      ? await (await this.statement(sql)).send(...params)
      : await this.conn.send(sql, true);
    const batches = [];
    for await (const batch of reader) {
      if (this.cancelled) throw new BridgeError("Interrupted", "the query was cancelled");
      batches.push(batch);
    }
    return resultJSON(new this.arrow.Table(reader.schema, batches));
  }

  /** A user's statement (`mem.sql`), already passed by the Python guard. Two more walls:
   *  DuckDB's own parser counts it (preparing text of several statements fails; the
   *  prepared statement is closed at once, since its run could not be interrupted), and
   *  it runs inside a read-only transaction, rolled back whatever happens, in which
   *  DuckDB refuses every write. */
  async executeReadOnly({ sql, params }) {
    let prepared;
    try {
      prepared = await this.conn.prepare(sql);
    } catch (e) {
      if (/more than one statement|multiple statements/i.test(String(e && e.message))) {
        throw new BridgeError("ReadOnlySQLError", "only one statement is allowed (DuckDB reads several)");
      }
      throw e;
    }
    await prepared.close();
    await this.conn.query("BEGIN TRANSACTION READ ONLY");
    try {
      return await this.interruptible(sql, params);
    } finally {
      await this.conn.query("ROLLBACK");
    }
  }

  /** Interrupt the query in flight (if any); resolves once the engine took the request. */
  async cancel() {
    this.cancelled = true;
    try {
      await this.conn.cancelSent();
    } catch (_) { /* nothing in flight */ }
    return null;
  }

  async executemany({ sql, rows }) {
    if (mayRewriteEmbeddings(sql)) this.embeddingsRewritten++;
    const st = await this.statement(sql);
    for (const row of rows) await st.query(...row);
    return null;
  }

  // `cols` (one array per column) is the compact form Python sends; `rows` (arrays) also works
  async loadRows({ table, columns, rows, cols: data }) {
    data = data || columns.map((_, i) => rows.map((r) => r[i]));
    if (!data.length || !data[0].length) return null;
    if (table === "embeddings") this.embeddingsAppended++;
    const tmp = `__chatmem_load_${++this.tmp}`;
    await this.conn.insertArrowTable(arrowTable(this.arrow, columns, data), { name: tmp, create: true });
    const list = columns.map((c) => `"${c}"`).join(", ");
    try {
      await this.conn.query(`INSERT INTO "${table}" (${list}) SELECT ${list} FROM "${tmp}"`);
    } finally {
      await this.conn.query(`DROP TABLE IF EXISTS "${tmp}"`);
    }
    return null;
  }

  /** Whether the current database is a file (not an in-memory one `USE`d instead). */
  async intoFile() {
    const t = await this.conn.query(
      "SELECT path IS NOT NULL AS f FROM duckdb_databases() WHERE database_name = current_database()");
    return t.numRows > 0 && Boolean(t.getChildAt(0).get(0));
  }

  /** Append `cols` (one array, or Int32Array, per column, in the table's column order) to
   *  `table` straight from Arrow, without a staging table (a derivation's bulk loads): the
   *  two steps below. */
  async appendRows({ table, columns, cols }) {
    if (!cols.length || !cols[0].length) return null;
    return this.appendArrow({ table, bytes: await this.arrowBytes({ columns, cols }) });
  }

  /** `cols` as Arrow IPC bytes for `appendArrow`, built on the page's thread a slice at a
   *  time, the page given back between slices (a derivation builds a load's while the
   *  engine appends the one before). */
  async arrowBytes({ columns, cols }) {
    return this.arrow.tableToIPC(await arrowTableInSlices(this.arrow, columns, cols, yieldToPage), "stream");
  }

  /** Append the Arrow IPC `bytes` (`arrowBytes`; handed over to the engine's worker) to `table`. */
  async appendArrow({ table, bytes }) {
    if (table === "embeddings") this.embeddingsAppended++;
    await this.conn.insertArrowFromIPCStream(bytes, { name: table, create: false });
    return null;
  }

  /** The `k` rows of model `modelKey` and `dim` dimensions nearest to the unit vector
   *  `vector` (nearest.js) among those `filter` admits, after reading the rows written
   *  since the last call: {cols: [message_id, created_at, sim, rsim]}. */
  async nearest({ modelKey, dim, vector, k, candidates, filter = null }) {
    if (this.nearestEpoch !== this.embeddingsRewritten) {
      this.nearestSets.clear();
      this.nearestEpoch = this.embeddingsRewritten;
    }
    const key = `${modelKey}:${dim}`;
    let kept = this.nearestSets.get(key);
    if (!kept) {
      kept = { vectors: new NearestVectors(dim), appended: -1 };
      this.nearestSets.set(key, kept);
    }
    if (kept.appended !== this.embeddingsAppended) {
      const appended = this.embeddingsAppended;
      try {
        await this._readVectors(kept.vectors, modelKey, dim);
      } catch (e) {
        this.nearestSets.delete(key); // half read: read again next time
        throw e;
      }
      kept.appended = appended;
    }
    return { cols: kept.vectors.nearest(vector, k, candidates, filter) };
  }

  async _readVectors(vectors, modelKey, dim) {
    const where = `WHERE model_key = ${Math.trunc(modelKey)} AND dim = ${Math.trunc(dim)} AND rowid > ${vectors.rowid}`;
    const count = await this.conn.query(`SELECT count(*) AS n FROM embeddings ${where}`);
    vectors.reserve(vectors.n + Number(count.getChildAt(0).get(0)));
    const reader = await this.conn.send(
      `SELECT rowid AS r, message_id, created_at, vec, scale, cvec, cscale, session_id, role FROM embeddings ${where} ORDER BY rowid`,
      true,
    );
    let since = performance.now();
    for await (const batch of reader) {
      const [r, id, created, vec, scale, cvec, cscale, session, role] = batch.schema.fields.map((_, i) => batch.getChildAt(i));
      for (let i = 0; i < batch.numRows; i++) {
        const c = cvec.get(i);
        const when = created.get(i);
        vectors.add(
          Number(r.get(i)), id.get(i), when === null ? null : Number(when),
          vec.get(i).toArray(), scale.get(i), c === null ? null : c.toArray(), cscale.get(i),
          session.get(i), role.get(i),
        );
      }
      if (performance.now() - since > SLICE_MS) {
        await yieldToPage();
        since = performance.now();
      }
    }
  }

  async close() {
    if (this.closed) return null;
    this.closed = true;
    for (const st of this.statements.values()) await st.close();
    await this.conn.close();
    await this.db.terminate();
    return null;
  }

  call(method, argsJson) {
    return callMethod(this, ENGINE_METHODS, method, argsJson, () => {
      if (this.closed) throw new BridgeError("DatabaseClosed", "the query index is closed");
    });
  }
}

/**
 * Start DuckDB-Wasm from this site (no network): resolves to an engine handle.
 * `path` null: an in-memory database; `opfs://name.duckdb`: a database file in
 * the origin's private file system (one tab at a time: the page runtime opens
 * it only while holding the file's Web Lock). A file that cannot be opened
 * rejects with `{name: "IndexLocked"}`.
 */
export async function duckdbOpen(path = null) {
  const early = takePrestarted();
  if (early) {
    const t0 = performance.now();
    try {
      const { duckdb, arrow, db, openMs } = await early;
      return await start(duckdb, arrow, path, { ...openMs, waited: Math.round(performance.now() - t0) }, db);
    } catch (_) { /* started early but failed: start afresh below */ }
  }
  const t0 = performance.now();
  const { duckdb, arrow } = await modules();
  return start(duckdb, arrow, path, { import: Math.round(performance.now() - t0) });
}

let imported = null;

/** DuckDB-Wasm's and Arrow's modules, imported once (again after a failure). */
function modules() {
  imported ??= (async () => {
    const duckdb = await importAgain("@duckdb/duckdb-wasm", "../duckdb/duckdb-browser.mjs");
    const arrow = await importAgain("apache-arrow", "../vendor/apache-arrow/Arrow.dom.mjs");
    return { duckdb, arrow };
  })();
  imported.catch(() => { imported = null; });
  return imported;
}

/** Import DuckDB-Wasm's modules now (or wait for the import under way): the main thread's
 *  part of opening an engine, which work of the page's own would slow down (each of the
 *  130 modules waits for the thread); answers whether they are there. Never rejects. */
export function duckdbImport() {
  return modules().then(() => true, () => false);
}

// One engine started ahead of need (`duckdbPrestart`): its worker and Wasm instance,
// no database opened yet. The next `duckdbOpen` takes it; one nobody took within
// PRESTART_KEEP_MS of being ready is terminated (this tab did not need an engine,
// e.g. it asks another tab's index).
let prestarted = null;
const PRESTART_KEEP_MS = 60_000;

function takePrestarted() {
  const p = prestarted;
  prestarted = null;
  return p;
}

/**
 * Start DuckDB-Wasm now, in its worker (the Wasm is fetched and compiled there, off the
 * main thread), so that the first query of the page does not wait for it: a page whose
 * first search must be fast right after `ready` calls this while Pyodide loads (the app
 * does not: its interface comes first, DuckDB-Wasm after the first paint). Idempotent;
 * never rejects.
 */
export function duckdbPrestart() {
  if (prestarted) return;
  const t0 = performance.now();
  // the worker's script is fetched and run from now on, while the modules are imported
  const worker = new Worker(here("../duckdb/duckdb-browser-eh.worker.js"));
  const p = (async () => {
    let mods;
    try {
      mods = await modules();
    } catch (e) {
      worker.terminate();
      throw e;
    }
    const { duckdb, arrow } = mods;
    const openMs = { import: Math.round(performance.now() - t0) };
    const t1 = performance.now();
    const db = new duckdb.AsyncDuckDB(new duckdb.VoidLogger(), worker);
    await db.instantiate(here("../duckdb/duckdb-eh.wasm"));
    openMs.instantiate = Math.round(performance.now() - t1);
    return { duckdb, arrow, db, openMs };
  })();
  prestarted = p;
  p.then(({ db }) => setTimeout(() => {
    if (prestarted === p) {
      prestarted = null;
      db.terminate().catch(() => {});
    }
  }, PRESTART_KEEP_MS), () => { if (prestarted === p) prestarted = null; });
}

/**
 * `import(specifier)`, tried once more under a fresh URL if the first fetch failed
 * (a busy server or a dropped connection): Chromium fetches a failed module again
 * (boot.js `twice`), but a browser that keeps the failure for its URL would not.
 */
async function importAgain(specifier, path) {
  try {
    return await import(specifier);
  } catch (e) {
    if (!(e instanceof TypeError)) throw e;
    return await import(`${here(path)}?again=${Date.now()}`);
  }
}

// `openMs`: milliseconds per step of the opening (import, instantiate, open, setup; with an
// engine started early, `waited` for it); `db` an instantiated AsyncDuckDB to use
async function start(duckdb, arrow, path, openMs = {}, db = null) {
  let t = performance.now();
  const lap = (step) => { const n = performance.now(); openMs[step] = Math.round(n - t); t = n; };
  if (!db) {
    db = new duckdb.AsyncDuckDB(new duckdb.VoidLogger(), new Worker(here("../duckdb/duckdb-browser-eh.worker.js")));
    await db.instantiate(here("../duckdb/duckdb-eh.wasm"));
    lap("instantiate");
  }
  let conn;
  try {
    if (path) await db.open({ path, accessMode: duckdb.DuckDBAccessMode.READ_WRITE });
    lap("open");
    conn = await db.connect();
    // one round trip to the worker, the statements in order (the first that fails stops the
    // rest): no extension loads, the file touched (to fail here, not later), then no files
    // (registered or OPFS), no network, and no SET that could undo it. A commit that would
    // take the WAL past checkpoint_threshold checkpoints instead of writing it: the OPFS WAL
    // file never shrinks (a checkpoint empties it, the file keeps its size), so at the
    // default 16 MB every save of the index in steps left a WAL as large as the index
    await conn.query([
      "SET autoload_known_extensions=false",
      "SET autoinstall_known_extensions=false",
      ...(path ? ["SELECT count(*) FROM duckdb_tables()"] : []),
      "SET enable_external_access=false",
      "SET checkpoint_threshold='1MB'",
      "SET lock_configuration=true",
    ].join(";\n"));
    lap("setup");
  } catch (e) {
    try { await db.terminate(); } catch (_) { /* already gone */ }
    throw new BridgeError(path ? "IndexLocked" : "Error", `${path || "duckdb"}: ${e?.message || e}`);
  }
  const duck = new Duck(duckdb, arrow, db, conn);
  duck.path = path;
  duck.openMs = openMs;
  return duck;
}

/** `duckdbOpen` as an envelope (never rejects): {ok, value: engine, error: JSON text} (for Python). */
export function duckdbOpenEnvelope(path = null) {
  return opened(duckdbOpen(path));
}

/** Whether the origin private file system holds a file `name` (a cached index). */
export async function opfsExists(name) {
  try {
    await (await navigator.storage.getDirectory()).getFileHandle(name);
    return true;
  } catch (e) {
    if (e?.name === "NotFoundError") return false;
    throw e;
  }
}

/**
 * Remove an OPFS file (a cached index) and its `.wal`; true when it existed.
 * A DuckDB worker that has just been terminated may still hold the file's access
 * handle for a moment (removal then fails with NoModificationAllowedError): the
 * removal is tried again until the handle is gone, for up to `patienceMs`.
 */
export async function opfsRemove(name, patienceMs = 5000) {
  const root = await navigator.storage.getDirectory();
  const until = Date.now() + patienceMs;
  let found = false;
  for (const n of [name, `${name}.wal`]) {
    for (let wait = 20; ; wait = Math.min(wait * 2, 500)) {
      try {
        await root.removeEntry(n);
        found = found || n === name;
        break;
      } catch (e) {
        if (e?.name === "NotFoundError" || Date.now() >= until) break;
        await new Promise((r) => setTimeout(r, wait)); // the handle's release cannot be awaited
      }
    }
  }
  return found;
}
