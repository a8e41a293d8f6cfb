// Approximate nearest neighbours for semantic search over a large history: the
// `embeddings` rows of one model, kept beside the engine in this thread.
//
// A search reads one bit per dimension of every row (the sign of its ranking vector:
// the in-context vector where the row has one, else its own), takes the `candidates`
// rows whose bits differ least from the query's signs (Hamming distance), and ranks
// those alone by the exact cosine of their int8 vectors (the arithmetic of
// `embeddings.cosine_sql`). DuckDB reads a list column whole whatever a filter keeps,
// so the candidates' vectors are kept here too; a search costs a pass over dim / 8
// bytes a row and `candidates` dot products instead of a cast and a dot product per row.
// Each row's session and role are kept as small codes, so a filtered search counts the
// distances of the rows its filter admits only.
//
// The rows are derived from the engine's `embeddings` table and kept in step by the
// engine (query-engine.js): rows appended since the last search are read by rowid
// (which only grows as rows are appended), any other write to the table reads it again.

const WORD_BITS = 32;

// The in-memory database a cached index is copied into and queried in (index/cache.py):
// a statement names it, or no database at all, when it writes the index's own tables.
const WORK = "chatmem_work";
// statements that move the whole working database: every row may have changed
const WHOLE = ["ROLLBACK", "USE", "COPY", "ATTACH", "DETACH"];
const NAME = String.raw`(?:"[^"]*"|[A-Za-z_][A-Za-z_0-9$]*)`;
const TARGET = new RegExp(
  String.raw`^\s*(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|DELETE\s+FROM|UPDATE|` +
    String.raw`CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?|` +
    String.raw`DROP\s+TABLE(?:\s+IF\s+EXISTS)?|ALTER\s+TABLE|TRUNCATE(?:\s+TABLE)?)\s+` +
    String.raw`(${NAME}(?:\s*\.\s*${NAME}){0,2})`,
  "i",
);

/** Whether a statement of the library's may change the working `embeddings` rows other
 *  than by appending them (`loadRows`): the rule of `sql_engine.may_rewrite_embeddings`. */
export function mayRewriteEmbeddings(sql) {
  const head = sql.trimStart().slice(0, 8).toUpperCase();
  if (WHOLE.some((w) => head.startsWith(w))) return true;
  if (!sql.toLowerCase().includes("embeddings") || /^(SELECT|WITH|EXPLAIN|FROM|PRAGMA)/.test(head)) return false;
  const m = TARGET.exec(sql);
  if (!m) return true;
  const parts = m[1].match(new RegExp(NAME, "g")).map((p) => p.trim().replace(/^"|"$/g, "").toLowerCase());
  if (parts[parts.length - 1] !== "embeddings") return false;
  if (parts.length === 3 || (parts.length === 2 && parts[0] !== "main" && parts[0] !== "temp")) return parts[0] === WORK;
  return true;
}

// The bits set in words [o, o + words) of `codes` XOR `signs`: per word the 2- and 4-bit
// counts, two words' 4-bit counts added (at most 8 each), bytes summed across words (at
// most 16 a pair, so up to 15 pairs before the bytes are added into the total).
function distance(codes, o, signs, words) {
  let total = 0;
  let acc = 0;
  let pairs = 0;
  for (let w = 0; w < words; w += 2) {
    let x = codes[o + w] ^ signs[w];
    let y = w + 1 < words ? codes[o + w + 1] ^ signs[w + 1] : 0;
    x -= (x >>> 1) & 0x55555555;
    y -= (y >>> 1) & 0x55555555;
    x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
    y = (y & 0x33333333) + ((y >>> 2) & 0x33333333);
    x += y;
    acc += (x & 0x0f0f0f0f) + ((x >>> 4) & 0x0f0f0f0f);
    if (++pairs === 15) {
      total += bytesSum(acc);
      acc = 0;
      pairs = 0;
    }
  }
  return total + bytesSum(acc);
}

function bytesSum(x) {
  x = (x & 0x00ff00ff) + ((x >>> 8) & 0x00ff00ff);
  return (x & 0xffff) + (x >>> 16);
}

function dot(vectors, at, dim, q) {
  let s = 0;
  for (let d = 0; d < dim; d++) s += vectors[at + d] * q[d];
  return s;
}

/** The rows of one (model, dimensions) in the form a search reads them. */
export class NearestVectors {
  constructor(dim) {
    this.dim = dim;
    this.words = Math.ceil(dim / WORD_BITS);
    this.n = 0;
    this.capacity = 0;
    /** the largest `embeddings` rowid read */
    this.rowid = -1;
    this.ids = [];
    this.created = new Float64Array(0);
    this.codes = new Uint32Array(0);
    this.rank = new Int8Array(0);
    this.rankScale = new Float32Array(0);
    this.own = new Int8Array(0);
    this.ownScale = new Float32Array(0);
    /** 1 where the row has an in-context vector (`own` holds its own one), else 0 */
    this.context = new Uint8Array(0);
    this.distances = new Uint16Array(0);
    /** each row's session and role, as codes of `sessions` and `roles` (what a filter reads) */
    this.session = new Uint32Array(0);
    this.role = new Uint8Array(0);
    this.sessions = new Map();
    this.roles = new Map();
  }

  /** Room for `rows` rows in all (a read of many rows allocates once). */
  reserve(rows) {
    if (rows > this.capacity) this._resize(rows);
  }

  _grow(need) {
    if (need > this.capacity) this._resize(Math.max(need, this.capacity * 2, 1024));
  }

  _resize(cap) {
    const more = (Kind, old, per) => {
      const a = new Kind(cap * per);
      a.set(old);
      return a;
    };
    this.created = more(Float64Array, this.created, 1);
    this.codes = more(Uint32Array, this.codes, this.words);
    this.rank = more(Int8Array, this.rank, this.dim);
    this.rankScale = more(Float32Array, this.rankScale, 1);
    this.own = more(Int8Array, this.own, this.dim);
    this.ownScale = more(Float32Array, this.ownScale, 1);
    this.context = more(Uint8Array, this.context, 1);
    this.session = more(Uint32Array, this.session, 1);
    this.role = more(Uint8Array, this.role, 1);
    this.distances = new Uint16Array(cap);
    this.capacity = cap;
  }

  /** Add one `embeddings` row: `vec`/`cvec` int8 arrays of `dim` values (`cvec` null
   *  where the row has no in-context vector), of session `session` and role `role`. */
  add(rowid, id, created, vec, scale, cvec, cscale, session = null, role = null) {
    this._grow(this.n + 1);
    const r = this.n++;
    const dim = this.dim;
    const ranked = cvec ?? vec;
    this.ids[r] = id;
    this.session[r] = codeOf(this.sessions, session);
    this.role[r] = codeOf(this.roles, role);
    this.created[r] = created ?? -Infinity;
    this.rank.set(ranked, r * dim);
    this.rankScale[r] = cvec ? cscale : scale;
    this.context[r] = cvec ? 1 : 0;
    if (cvec) {
      this.own.set(vec, r * dim);
      this.ownScale[r] = scale;
    }
    const base = r * this.words;
    for (let d = 0; d < dim; d++) {
      if (ranked[d] > 0) this.codes[base + (d >>> 5)] |= 1 << (d & 31);
    }
    if (rowid > this.rowid) this.rowid = rowid;
  }

  /** The `k` rows of the best ranking cosine with the unit vector `q` among the
   *  `candidates` nearest in Hamming distance: columns [message_id, created_at, sim,
   *  rsim] (`sim` the own vector's cosine), best first (ties: the larger id first).
   *  `filter` ({sessions, roles: lists or null, start, end: milliseconds or null}, as
   *  `hits.FilterValues` with its characters' sessions resolved) keeps out the rows it
   *  does not admit before their distance is counted: the candidates are the admitted
   *  rows nearest the query, all of them when they are fewer. */
  nearest(vector, k, candidates, filter = null) {
    const { n, dim, words, codes } = this;
    const q = Float64Array.from(vector);
    const signs = new Uint32Array(words);
    for (let d = 0; d < dim; d++) if (q[d] > 0) signs[d >>> 5] |= 1 << (d & 31);
    const dist = this.distances;
    const counts = new Uint32Array(dim + 1);
    const admits = this.admission(filter);
    let admitted = 0;
    for (let r = 0, o = 0; r < n; r++, o += words) {
      if (admits && !admits(r)) {
        dist[r] = OUT;
        continue;
      }
      const h = distance(codes, o, signs, words);
      dist[r] = h;
      counts[h]++;
      admitted++;
    }
    // every row closer than `edge`, then rows at `edge` in table order up to `candidates`
    const want = Math.min(candidates, admitted);
    let edge = 0;
    for (let seen = 0; edge <= dim && seen + counts[edge] < want; edge++) seen += counts[edge];
    let atEdge = want;
    for (let h = 0; h < edge; h++) atEdge -= counts[h];
    const picked = new Int32Array(want);
    const scores = new Float64Array(want);
    let m = 0;
    for (let r = 0; r < n && m < want; r++) {
      const h = dist[r];
      if (h < edge || (h === edge && atEdge-- > 0)) {
        picked[m] = r;
        scores[m] = dot(this.rank, r * dim, dim, q) * this.rankScale[r];
        m++;
      }
    }
    // the candidates scoring at least the k-th best score, then those alone in order
    const ids = this.ids;
    const sorted = scores.slice(0, m).sort();
    const least = m > k ? sorted[m - k] : -Infinity;
    const order = [];
    for (let i = 0; i < m; i++) if (scores[i] >= least) order.push(i);
    order.sort((a, b) => scores[b] - scores[a] || (ids[picked[b]] > ids[picked[a]] ? 1 : ids[picked[b]] < ids[picked[a]] ? -1 : 0));
    const top = order.slice(0, k);
    const out = [[], [], [], []];
    for (const i of top) {
      const r = picked[i];
      const rsim = scores[i];
      const sim = this.context[r] ? dot(this.own, r * dim, dim, q) * this.ownScale[r] : rsim;
      out[0].push(ids[r]);
      out[1].push(this.created[r] === -Infinity ? null : this.created[r]);
      out[2].push(sim);
      out[3].push(rsim);
    }
    return out;
  }

  /** Whether row r passes `filter` (see `nearest`), or null when it admits every row. */
  admission(filter) {
    if (!filter) return null;
    const mask = (codes, values) => {
      if (values === null || values === undefined) return null;
      const ok = new Uint8Array(codes.size + 1);
      for (const v of values) {
        const c = codes.get(v);
        if (c !== undefined) ok[c] = 1;
      }
      return ok;
    };
    const sessions = mask(this.sessions, filter.sessions);
    const roles = mask(this.roles, filter.roles);
    const start = filter.start ?? null;
    const end = filter.end ?? null;
    if (!sessions && !roles && start === null && end === null) return null;
    const { session, role, created } = this;
    // a row without a time (-Infinity here, NULL in SQL) passes no time bound
    return (r) => (!sessions || sessions[session[r]] === 1) && (!roles || roles[role[r]] === 1)
      && (start === null || (created[r] !== -Infinity && created[r] >= start))
      && (end === null || (created[r] !== -Infinity && created[r] <= end));
  }
}

/** A row kept out by a filter: past any Hamming distance, so never a candidate. */
const OUT = 0xffff;

/** The code of `value` in `codes` (numbered from 1 as first seen; 0: null). */
function codeOf(codes, value) {
  if (value === null || value === undefined) return 0;
  let c = codes.get(value);
  if (c === undefined) {
    c = codes.size + 1;
    codes.set(value, c);
  }
  return c;
}
