// Deriving the keyword index from scratch in the page, next to the store and the engine:
// the records go from IndexedDB to DuckDB-Wasm without crossing into Python.
//
// Python (chatmem.index.derivation) drives a `Derivation` chunk by chunk:
//
//   next()      reads the next ~`chunk` messages (the sessions in the given order, each by
//               seq), splits ASCII texts into words and stems the new ones here (words.js);
//               answers the words it has no terms for (none: the protocol lets Python
//               supply them) and the texts that are not ASCII: {words, hard} (null at the end)
//   feed(a)     takes Python's answer, {terms: {word: [term, ...]}, hard: [[word, ...]]}
//               (the other texts' words and their terms: tokenize.words, terms_of_word),
//               numbers the terms, counts each doc's term frequencies and loads the
//               messages (into `stage`, with their doc numbers and lengths: `docs` is made
//               of it in SQL) and `postings` in bulk while the next chunk is read; answers the
//               docs as {doc, id, created, len} columns
//   attachEngine(e)  (called directly, not through `call`) the engine of a derivation begun
//               while it was opening: reading, splitting and counting ran meanwhile, the
//               loads (at most BACKLOG chunks) waited for it
//   textFill(n) (called directly) after a derivation with `texts` false, which loaded `docs`
//               instead of the stage and left `messages` empty: a `TextFill` that appends
//               the stored messages, texts and all, about `n` a step (chatmem.index.fill)
//   finish()    waits for the loads, loads `terms` (df left to the caller) and answers the
//               milliseconds spent {read, words, stems, count, load, wait: for DuckDB's backlog,
//               see BACKLOG} and whether `postings` went in
//               sorted by (tid, doc) (`sorted`: held here and counting-sorted, while they fit
//               in `sortMax` rows; else loaded chunk by chunk, for the caller to sort)
//
// The ASCII words are `tokenize._ASCII_WORD`'s matches on the lowercased text, numbers losing
// their commas and words their apostrophes: the same as Python's `words` for ASCII text
// (a browser test compares the two derivations table by table). Nothing here is durable.

import { BridgeError, callMethod } from "./envelope.js";
import { SLICE_MS, yieldToPage } from "./page-yield.js";
import { sessionRange } from "./schema.js";
import { ASCII, WordTable, asciiTerm, extractText, loadStemmer } from "./words.js";

const METHODS = new Set(["next", "feed", "finish", "abort"]);
const FILL_METHODS = new Set(["step"]);
const POSTINGS = ["tid", "doc", "tf"];
const DOCS = ["doc", "message_id", "session_id", "role", "created_at", "doc_len"];
/** the most chunks whose loads may wait for DuckDB's worker: reading and counting run ahead
 *  of its appends (into an OPFS file, much slower), and a queue without a bound held 20 or
 *  more chunks' texts and columns at 1,000,000 messages (the page's peak: 3.4 GB) */
const BACKLOG = 2;

/** The store's messages read chunk by chunk: the sessions in the given order, each by seq;
 *  whole small sessions a chunk, a big one a page of `chunk` at a time. */
class SessionReader {
  constructor(database, sessions, chunk) {
    this.database = database;
    this.sessions = sessions;
    this.chunk = chunk;
    this.at = 0;          // the next session to read
    this.seqAfter = null; // a big session read part way: the last seq read
  }

  get done() {
    return this.at >= this.sessions.length;
  }

  /** The records of the next chunk (whole small sessions, or a page of a big one). */
  async read() {
    const out = [];
    if (this.at >= this.sessions.length) return out;
    const index = this.database.tx(["messages"]).objectStore("messages").index("sessionSeq");
    const reads = [];
    let size = 0;
    while (this.at < this.sessions.length && size < this.chunk) {
      const [sid, count] = this.sessions[this.at];
      if (count >= this.chunk || this.seqAfter !== null) {
        if (reads.length) break;  // a big session gets a read of its own
        const lower = this.seqAfter === null ? [sid, -Infinity] : [sid, this.seqAfter];
        const page = await index.getAll(IDBKeyRange.bound(lower, [sid, Infinity], this.seqAfter !== null), this.chunk);
        if (page.length === this.chunk) this.seqAfter = page[page.length - 1].seq;
        else {
          this.seqAfter = null;
          this.at++;
        }
        return page;
      }
      reads.push(index.getAll(sessionRange(sid)));
      size += count;
      this.at++;
    }
    for (const page of await Promise.all(reads)) for (const rec of page) out.push(rec);
    return out;
  }
}

/** The `messages` table's columns of `records` (`columns`: [column, record key] pairs, the
 *  text keyed ""), the texts given (`texts[i]`: the plain text of `records[i]`). */
function messageColumns(columns, records, texts) {
  return columns.map(([col, key]) => (
    key === "" ? texts
      : col === "token_count" ? records.map((r) => (typeof r[key] === "number" ? Math.trunc(r[key]) : 0))
        : records.map((r) => r[key] ?? null)));
}

class Derivation {
  /**
   * `sessions`: [[sessionId, messageCount], ...] in the order to read; `columns`: the
   * `messages` table's [column, record key] pairs (the text is the column keyed ""); `stage`:
   * the table they go to, with each message's `doc` and `doc_len` (the caller makes `docs`
   * and `messages` of it in SQL: the ids, sessions and roles cross once); `chunk`: about
   * this many messages a chunk; `sortMax`: the most postings held for `finish` to load
   * sorted (0: none); `batch`: the most held postings a load; `transaction`: into a file,
   * the loads go in transactions of about this many messages with their postings (the
   * engine checkpoints at each commit past 1 MB of WAL, and a checkpoint rewrites the row
   * group still filling, so a commit per chunk compressed each row group's texts several
   * times over; one transaction for the whole load held it all in memory; 0: each load
   * commits on its own). In memory the caller runs the whole derivation in one transaction.
   * `texts` false: the texts are left out, the docs loaded into `docs` (not `stage`), and
   * `messages` is filled afterwards by `textFill()` (the first search needs no text).
   */
  constructor(database, engine, {
    sessions, columns, stage, chunk, sortMax = 0, batch = 1 << 21, transaction = 0, texts = true,
  }) {
    this.database = database;
    this.engine = engine;  // null until `attachEngine` (a derivation begun while it opens)
    this.sessions = sessions;
    this.total = sessions.reduce((sum, [, count]) => sum + count, 0);  // about as many messages to read
    this.columns = columns;
    this.stage = stage;
    this.texts = texts;
    this.chunk = chunk;
    this.reader = new SessionReader(database, sessions, chunk);
    this.doc = 0;
    this.tids = new Map();   // term -> tid
    this.terms = [];         // tid -> term
    this.codes = new WordTable();  // word -> its code (see `code`)
    this.ahead = null;
    this.current = null;
    // the loads wait for the engine; an abort before it came lets them go as no-ops
    this.loading = engine ? Promise.resolve() : new Promise((resolve) => { this.release = resolve; });
    this.loadBefore = this.loading;  // the load queued before the last (see `load`)
    this.building = this.loading;    // the last load's Arrow
    this.queued = [];     // per chunk whose loads are queued: when they are done (see BACKLOG)
    this.sortMax = sortMax;
    this.batch = batch;
    this.held = sortMax > 0 ? [new Int32Array(1 << 16), new Int32Array(1 << 16), new Int32Array(1 << 16)] : null;
    this.heldRows = 0;
    this.runs = 0;  // runs of sorted postings loaded (see `hold`)
    this.sorted = null;  // the arrays a run is sorted into (see `loadRun`)
    this.runBuilt = Promise.resolve();  // when the last run's loads are in Arrow
    this.failed = null;
    this.intoFile = null;  // whether the tables are in a file (asked at the first load)
    this.inTransaction = false;  // a transaction of the loads is open (into a file only)
    this.transactionMessages = 0;
    this.transactionMax = transaction;
    this.ms = { read: 0, words: 0, stems: 0, count: 0, sort: 0, arrow: 0, load: 0, wait: 0 };
  }

  async next() {
    this.check();
    await loadStemmer();
    let t = performance.now();
    const records = await (this.ahead || this.reader.read());
    this.ahead = null;
    if (!records.length && this.reader.done) {
      this.current = null;
      return null;
    }
    this.ahead = this.reader.read();
    this.ahead.catch(() => {});  // awaited by the next call; a failure is reported there
    let now = performance.now();
    this.ms.read += now - t;
    t = now;
    const texts = new Array(records.length);
    const docs = new Array(records.length);  // per doc: its words' codes, a word still unknown as itself
    const hard = [];
    const unknown = new Set();
    const codes = this.codes;
    let sliced = t;
    for (let i = 0; i < records.length; i++) {
      const text = extractText(records[i].content);
      texts[i] = text;
      if (ASCII.test(text)) docs[i] = codes.scan(text, unknown);
      else {
        docs[i] = null;
        hard.push(text);
      }
      if ((i & 63) === 63 && performance.now() - sliced > SLICE_MS) {
        this.ms.words += performance.now() - t;
        await yieldToPage();
        t = sliced = performance.now();
      }
    }
    now = performance.now();
    this.ms.words += now - t;
    t = sliced = now;
    let k = 0;
    for (const w of unknown) {
      this.code(w, [asciiTerm(w)]);
      if ((++k & 255) === 0 && performance.now() - sliced > SLICE_MS) {
        this.ms.stems += performance.now() - t;
        await yieldToPage();
        t = sliced = performance.now();
      }
    }
    this.ms.stems += performance.now() - t;
    this.current = { records, texts, docs };
    return { words: [], hard };
  }

  /** The code of the word `w`: the tid of its one term, or an Int32Array of its terms' tids
   *  (a CJK run's bigrams), the terms numbered on first sight. */
  code(w, terms) {
    const ids = new Int32Array(terms.length);
    for (let j = 0; j < terms.length; j++) {
      let tid = this.tids.get(terms[j]);
      if (tid === undefined) {
        tid = this.terms.length;
        this.tids.set(terms[j], tid);
        this.terms.push(terms[j]);
      }
      ids[j] = tid;
    }
    const c = ids.length === 1 ? ids[0] : ids;
    this.codes.set(w, c);
    return c;
  }

  async feed({ terms, hard }) {
    this.check();
    const cur = this.current;
    if (!cur) throw new BridgeError("InvalidStateError", "feed() without a chunk from next()");
    this.current = null;
    let t = performance.now();
    for (const w in terms) if (!this.codes.has(w)) this.code(w, terms[w]);
    const { records, texts, docs: words } = cur;
    const n = records.length;
    let h = 0;
    for (let i = 0; i < n; i++) if (words[i] === null) words[i] = hard[h++];
    if (h !== hard.length) throw new BridgeError("DataError", "feed(): the hard texts' words do not match the chunk");
    let total = 0;
    for (const ws of words) total += ws.length;
    let tid = new Int32Array(total + 16), doc = new Int32Array(total + 16), tf = new Int32Array(total + 16);
    const lens = new Int32Array(n);
    const counts = new Int32Array(this.terms.length);
    const seen = [];
    const codes = this.codes;
    let p = 0;
    let sliced = t;
    for (let i = 0; i < n; i++) {
      const d = this.doc + i;
      const ws = words[i];
      let len = 0;
      for (let j = 0; j < ws.length; j++) {
        let c = ws[j];
        if (typeof c === "string") {
          const got = codes.get(c);
          if (got === undefined) throw new BridgeError("DataError", `feed(): no terms for the word ${JSON.stringify(c)}`);
          c = got;
        }
        if (typeof c === "number") {
          if (counts[c]++ === 0) seen.push(c);
          len++;
        } else {
          for (let k = 0; k < c.length; k++) if (counts[c[k]]++ === 0) seen.push(c[k]);
          len += c.length;
        }
      }
      if (p + seen.length > tid.length) {
        const grow = (a) => {
          const b = new Int32Array(Math.max(a.length * 2, p + seen.length));
          b.set(a.subarray(0, p));
          return b;
        };
        tid = grow(tid);
        doc = grow(doc);
        tf = grow(tf);
      }
      for (const x of seen) {
        tid[p] = x;
        doc[p] = d;
        tf[p] = counts[x];
        counts[x] = 0;
        p++;
      }
      seen.length = 0;
      lens[i] = len;
      if ((i & 63) === 63 && performance.now() - sliced > SLICE_MS) {
        this.ms.count += performance.now() - t;
        await yieldToPage();
        t = sliced = performance.now();
      }
    }
    const first = this.doc;
    this.doc += n;
    const docs = Array.from({ length: n }, (_, i) => first + i);
    const get = (key) => records.map((r) => r[key] ?? null);
    const ids = get("id");
    const created = get("createdAt");
    const postings = [tid.subarray(0, p), doc.subarray(0, p), tf.subarray(0, p)];
    this.ms.count += performance.now() - t;
    const waited = performance.now();
    while (this.queued.length >= BACKLOG) await this.queued.shift().catch(() => {});
    this.ms.wait += performance.now() - waited;
    this.check();
    if (this.texts) {
      this.load(this.stage, [...this.columns.map(([c]) => c), "doc", "doc_len"],
        [...messageColumns(this.columns, records, texts), docs, Array.from(lens)]);
    } else {
      this.load("docs", DOCS, [docs, ids, get("sessionId"), get("role"), created, Array.from(lens)]);
    }
    await this.hold(postings);
    this.queued.push(this.loading);
    return { doc: docs, id: ids, created, len: Array.from(lens) };
  }

  /** Keep a chunk's postings to load them sorted by (tid, doc): up to `sortMax` rows are
   *  held, then counting-sorted and loaded as one run (`finish` loads the last). Each run is
   *  sorted, and the runs follow each other in doc order, so a term's postings lie in one
   *  stretch of each run: its zone maps find them, and DuckDB need not sort them again
   *  (one sort of them all did not fit in its memory: in parts, it held its single thread
   *  longer than the loads). With `sortMax` 0, each chunk's are loaded as they come. */
  async hold(postings) {
    const n = postings[0].length;
    if (!this.held) {
      this.load("postings", POSTINGS, postings);
      return;
    }
    if (this.heldRows && this.heldRows + n > this.sortMax) await this.loadRun();
    if (this.heldRows + n > this.held[0].length) {
      // room for as many as the whole store would hold at this rate (growing by doubling
      // copied every posting about twice: 0.1-0.2 s of the main thread at 100,000 messages)
      const projected = Math.ceil((1.05 * (this.heldRows + n) * this.total) / Math.max(1, this.doc));
      const size = Math.max(Math.min(this.sortMax, Math.max(2 * this.held[0].length, projected)), this.heldRows + n);
      this.held = this.held.map((a) => {
        const b = new Int32Array(size);
        b.set(a.subarray(0, this.heldRows));
        return b;
      });
    }
    postings.forEach((a, i) => this.held[i].set(a, this.heldRows));
    this.heldRows += n;
  }

  /** Sort the held postings and queue their loads as one run; hold anew. */
  async loadRun() {
    const t = performance.now();
    // the run before is in Arrow by now (its loads were queued chunks ago: see BACKLOG),
    // so its arrays can take this one (a new set each run left hundreds of megabytes to
    // the garbage collector)
    await this.runBuilt;
    const cols = await this.sortedHeld();
    this.heldRows = 0;
    this.runs++;
    this.ms.sort += performance.now() - t;
    this.loadPostings(cols, cols[0].length);
    this.runBuilt = this.building.catch(() => {});
  }

  /** Queue the first `n` rows of postings columns `cols`, `batch` rows a load (one Arrow
   *  copy of millions of rows at once would double the page's memory for a moment). */
  loadPostings(cols, n) {
    for (let at = 0; at < n; at += this.batch) {
      const end = Math.min(at + this.batch, n);
      this.load("postings", POSTINGS, cols.map((a) => a.subarray(at, end)));
    }
  }

  /** Views of the held postings sorted by (tid, doc) into `this.sorted`: a counting sort on
   *  tid, stable (docs were numbered in order), so each term's postings come out by doc;
   *  yielding to the page between slices. */
  async sortedHeld() {
    const [tid, doc, tf] = this.held;
    const n = this.heldRows;
    const terms = this.terms.length;
    const start = new Int32Array(terms + 1);
    if (!this.sorted || this.sorted[0].length < n) this.sorted = this.held.map((a) => new Int32Array(Math.max(a.length, n)));
    const [outTid, outDoc, outTf] = this.sorted.map((a) => a.subarray(0, n));
    const step = 1 << 16;
    let sliced = performance.now();
    const pause = async () => {
      if (performance.now() - sliced > SLICE_MS) {
        await yieldToPage();
        sliced = performance.now();
      }
    };
    for (let at = 0; at < n; at += step) {
      for (let i = at, end = Math.min(n, at + step); i < end; i++) start[tid[i] + 1]++;
      await pause();
    }
    for (let t = 0; t < terms; t++) start[t + 1] += start[t];
    for (let at = 0; at < terms; at += step) {
      for (let t = at, end = Math.min(terms, at + step); t < end; t++) outTid.fill(t, start[t], start[t + 1]);
      await pause();
    }
    for (let at = 0; at < n; at += step) {
      for (let i = at, end = Math.min(n, at + step); i < end; i++) {
        const to = start[tid[i]]++;
        outDoc[to] = doc[i];
        outTf[to] = tf[i];
      }
      await pause();
    }
    return [outTid, outDoc, outTf];
  }

  /** Queue a bulk load after the ones before it (DuckDB works in its worker meanwhile);
   *  into a file, in transactions of about `transaction` messages. Its Arrow is built on
   *  the page's thread while the engine appends the load before it, one load ahead (built
   *  in turn within the load, the worker waited for each). */
  load(table, columns, cols) {
    if (!cols.length || !cols[0].length) return;
    const messages = table === this.stage || table === "docs" ? cols[0].length : 0;
    const ahead = this.loadBefore;
    this.loadBefore = this.loading;
    const built = this.building = Promise.all([this.building, ahead]).then(async () => {
      if (!this.engine) return null;  // aborted before the engine came
      const t = performance.now();
      const bytes = await this.engine.arrowBytes({ columns, cols });
      this.ms.arrow += performance.now() - t;
      return bytes;
    });
    this.loading = Promise.all([this.loading, built]).then(async ([, bytes]) => {
      const t = performance.now();
      if (!this.engine || !bytes) return;
      this.intoFile ??= await this.engine.intoFile();
      if (this.intoFile && !this.inTransaction) {
        await this.engine.conn.query("BEGIN TRANSACTION");
        this.inTransaction = true;
      }
      await this.engine.appendArrow({ table, bytes });
      this.transactionMessages += messages;
      if (this.transactionMessages >= this.transactionMax) await this.commit();
      this.ms.load += performance.now() - t;
      this.ms[`load: ${table}`] = (this.ms[`load: ${table}`] || 0) + performance.now() - t;
    });
    this.loading.catch((e) => {
      this.failed = this.failed || e;
    });
  }

  /** End the loads' transaction (when one is open). */
  async commit() {
    if (!this.inTransaction) return;
    this.inTransaction = false;
    this.transactionMessages = 0;
    await this.engine.conn.query("COMMIT");
  }

  async finish() {
    this.check();
    const sorted = this.held !== null;
    if (sorted && this.heldRows) await this.loadRun();
    this.held = null;
    await this.loading;
    this.sorted = null;
    await this.commit();
    const n = this.terms.length;
    if (n && this.engine) await this.engine.appendRows({ table: "terms", columns: ["term", "tid", "df"],
      cols: [this.terms, Int32Array.from({ length: n }, (_, i) => i), new Int32Array(n)] });
    const out = {};
    for (const [k, v] of Object.entries(this.ms)) out[k] = Math.round(v * 10) / 10;
    out.terms = n;
    out.docs = this.doc;
    out.sorted = sorted;
    out.runs = this.runs;
    return out;
  }

  /** The fill of `messages` after a derivation without its texts (`texts` false), over the
   *  same sessions in the same order. */
  textFill(step) {
    return new TextFill(this.database, this.engine, { sessions: this.sessions, columns: this.columns, chunk: step });
  }

  /** The engine of a derivation made without one (while it was opening): the loads queued
   *  so far go in now, in order. */
  attachEngine(engine) {
    if (this.engine) return;
    this.engine = engine;
    this.release();
  }

  /** Stop: wait for the loads under way (the engine is free when this answers). */
  async abort() {
    this.current = null;
    if (!this.engine && this.release) this.release();
    this.held = null;
    try {
      await this.loading;
    } catch (_) { /* the caller reports its own error */ }
    this.sorted = null;
    if (this.inTransaction) {
      this.inTransaction = false;
      try {
        await this.engine.conn.query("ROLLBACK");
      } catch (_) { /* a transaction a failed statement already ended */ }
    }
    return null;
  }

  check() {
    if (this.failed) throw this.failed;
  }

  call(method, argsJson) {
    return callMethod(this, METHODS, method, argsJson);
  }
}

/** `messages` filled with the stored messages, texts and all, after a derivation that left
 *  them out (`Derivation`'s `texts` false), a step at a time. The caller runs each step
 *  under its index's lock and names in `skipSessions` and `skipIds` what the writes applied
 *  between steps put into `messages` (or took out) themselves: those records are left out,
 *  so a write is never undone or doubled by a record read before it. */
class TextFill {
  constructor(database, engine, { sessions, columns, chunk }) {
    this.reader = new SessionReader(database, sessions, chunk);
    this.engine = engine;
    this.columns = columns;
    this.ahead = null;  // the next chunk, read while the engine appends the step before
  }

  /** Append the next chunk (whole small sessions up to `chunk` messages, or a page of a big
   *  one) to `messages`, but the messages of the sessions `skipSessions` and those in
   *  `skipIds`: {messages: how many went in, done}. */
  async step({ skipSessions = [], skipIds = [] }) {
    const sessions = new Set(skipSessions);
    const ids = new Set(skipIds);
    const records = [];
    const texts = [];
    const page = await (this.ahead || this.reader.read());
    this.ahead = null;
    for (const r of page) {
      if (sessions.has(r.sessionId) || ids.has(r.id)) continue;
      records.push(r);
      texts.push(extractText(r.content));
    }
    const done = this.reader.done;
    if (!done) {
      this.ahead = this.reader.read();
      this.ahead.catch(() => {});  // awaited by the next step; a failure is reported there
    }
    if (records.length) {
      await this.engine.appendRows({
        table: "messages", columns: this.columns.map(([c]) => c), cols: messageColumns(this.columns, records, texts),
      });
    }
    return { messages: records.length, done };
  }

  call(method, argsJson) {
    return callMethod(this, FILL_METHODS, method, argsJson);
  }
}

/** A derivation of the index in `engine` (query-engine.js; null: one still opening, given
 *  later to `attachEngine`) from the store `database` (database.js); `options` as
 *  `Derivation`'s constructor, as JSON text (from Python). */
export function derivation(database, engine, optionsJson) {
  return new Derivation(database, engine, JSON.parse(optionsJson));
}
