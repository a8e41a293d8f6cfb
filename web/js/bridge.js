// chatmem's bridge to the browser: IndexedDB transactions (through `idb`).
//
// Python (chatmem/_browser.py) is the only caller. Rules:
// - One call = one IndexedDB transaction. Python never awaits inside one:
//   every call carries its whole batch, and resolves only once the
//   transaction has completed (`tx.done`), so an acknowledged write is durable.
// - Arguments and results cross as JSON text; the result is an envelope
//   {"ok": true, "value": ...} or {"ok": false, "error": {"name", "message"}}
//   with the real DOMException name, which Python maps to a typed error.
// - Writes post a notice on a BroadcastChannel so other tabs drop stale caches.

import { openDB, deleteDB } from "idb";

// end-to-end encryption for sync: WebCrypto, in its own module
export { e2eOpen, e2ePbkdf2, e2eSeal } from "./crypto.js";

// kv key whose presence turns the outbox on (chatmem.stores.base.OUTBOX_KEY)
const OUTBOX_KEY = "sync.outbox";

const SCHEMA = [
  // v1: the storage model of DESIGN.md section 3
  (db) => {
    const sessions = db.createObjectStore("sessions", { keyPath: "sessionId" });
    for (const k of ["userId", "characterId", "updatedAt", "createdAt"]) sessions.createIndex(k, k);
    const messages = db.createObjectStore("messages", { keyPath: "id" });
    messages.createIndex("sessionSeq", ["sessionId", "seq"], { unique: true });
    messages.createIndex("createdAt", "createdAt");
    messages.createIndex("role", "role");
    const outbox = db.createObjectStore("outbox", { keyPath: "key", autoIncrement: true });
    outbox.createIndex("op_id", "op_id", { unique: true });
    outbox.createIndex("session_id", "session_id");
    db.createObjectStore("dead_letter", { keyPath: "op_id" });
    db.createObjectStore("kv");
  },
  // v2: the outbox fills only once sync was turned on (kv OUTBOX_KEY). A database
  // with a sync config keeps its queue and is marked on; any other drops the queue
  // it kept for nothing (turning sync on uploads the history from the store).
  (db, tx) => {
    const kv = tx.objectStore("kv");
    kv.count("sync.config").then((n) => (n
      ? kv.put({ at: 0, sessions: [] }, OUTBOX_KEY)
      : tx.objectStore("outbox").clear()));
  },
];
export const SCHEMA_VERSION = SCHEMA.length;
const BLOCKED_TIMEOUT_MS = 5000;

class BridgeError extends Error {
  constructor(name, message) {
    super(message);
    this.name = name;
  }
}

function sessionRange(sessionId) {
  return IDBKeyRange.bound([sessionId, -Infinity], [sessionId, Infinity]);
}

// Outbox operations enqueued in the same transaction as the change they describe,
// once sync was turned on: the kv key OUTBOX_KEY is read
// in that transaction (the scope must hold "kv"). A message create op keeps data
// null: it refers to the stored message, which the push reads.

function enqueue(db, tx, ops, created = true) {
  if (!ops || ops.length === 0) return [];
  const keep = ops.filter((op) => created || !op.only_if_created).map(({ only_if_created: _o, ...op }) => op);
  if (keep.length === 0) return [];
  const outbox = tx.objectStore("outbox");
  const add = () => keep.map((op) => outbox.add(op));
  if (db.outboxOn) return add();  // turned on for good: no need to look again
  return [tx.objectStore("kv").count(OUTBOX_KEY).then((n) => {
    if (!n) return null;
    db.outboxOn = true;
    return Promise.all(add());
  })];
}

function nextSeqAfter(messages) {
  let max = -1;
  for (const m of messages) if (m.seq > max) max = m.seq;
  return max + 1;
}

async function settle(promises) {
  // Wait for every request and the transaction; the first failure wins.
  await Promise.all(promises);
}

// session fields that belong to the local store and never come from a pull
const STORE_OWNED = new Set(["messageCount", "nextSeq", "sessionId"]);

function placeholderSession(sessionId, createdAt) {
  return {
    sessionId, title: "", createdAt, updatedAt: createdAt, userId: "local", characterId: "default",
    pinned: false, archived: false, tags: [], parentId: null, forkIndex: null, forkReason: null,
    messageCount: 0, nextSeq: 0,
  };
}

class Database {
  constructor(name, db, durability) {
    this.name = name;
    this.db = db;
    this.durability = durability;
    this.closed = false;
    this.closedReason = null;
    this.listeners = [];
    this.channel = typeof BroadcastChannel === "function" ? new BroadcastChannel(`chatmem:${name}`) : null;
    if (this.channel) {
      this.channel.onmessage = (ev) => {
        for (const fn of this.listeners) {
          try { fn(JSON.stringify(ev.data)); } catch (e) { console.error(e); }
        }
      };
    }
  }

  tx(stores, mode = "readonly", durability = this.durability) {
    if (this.closed) throw new BridgeError("DatabaseClosed", this.closedReason || "the database is closed");
    return mode === "readwrite"
      ? this.db.transaction(stores, mode, { durability })
      : this.db.transaction(stores, mode);
  }

  notify(kind, sessionIds) {
    if (this.channel) this.channel.postMessage({ kind, sessions: sessionIds });
  }

  // ------------------------------------------------------------------ sessions
  async createSession({ record, messages, ops }) {
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const rec = { ...record, nextSeq: nextSeqAfter(messages), messageCount: messages.length };
    const ps = [tx.objectStore("sessions").add(rec)];
    for (const m of messages) ps.push(tx.objectStore("messages").add(m));
    ps.push(...enqueue(this, tx, ops), tx.done);
    await settle(ps).catch(duplicateId);
    this.notify("session", [record.sessionId]);
    return null;
  }

  async getSession({ sessionId }) {
    return (await this.db.get("sessions", sessionId)) ?? null;
  }

  async allSessions() {
    return await this.tx(["sessions"]).objectStore("sessions").getAll();
  }

  async updateSession({ sessionId, changes, ops }) {
    const tx = this.tx(["sessions", "outbox", "kv"], "readwrite");
    const store = tx.objectStore("sessions");
    const rec = await store.get(sessionId);
    if (!rec) {
      tx.abort();
      await tx.done.catch(() => {});
      throw new BridgeError("SessionNotFound", sessionId);
    }
    Object.assign(rec, changes);
    await settle([store.put(rec), ...enqueue(this, tx, ops), tx.done]);
    this.notify("session", [sessionId]);
    return rec;
  }

  async deleteSession({ sessionId, ops }) {
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const sessions = tx.objectStore("sessions");
    const existed = (await sessions.count(sessionId)) > 0;
    const keys = await tx.objectStore("messages").index("sessionSeq").getAllKeys(sessionRange(sessionId));
    const ps = keys.map((k) => tx.objectStore("messages").delete(k));
    ps.push(sessions.delete(sessionId), tx.done);
    if (existed) ps.push(...enqueue(this, tx, ops));
    await settle(ps);
    this.notify("session", [sessionId]);
    return existed;
  }

  async clearSession({ sessionId, now, ops }) {
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const sessions = tx.objectStore("sessions");
    const rec = await sessions.get(sessionId);
    if (!rec) {
      tx.abort();
      await tx.done.catch(() => {});
      throw new BridgeError("SessionNotFound", sessionId);
    }
    const keys = await tx.objectStore("messages").index("sessionSeq").getAllKeys(sessionRange(sessionId));
    const ps = keys.map((k) => tx.objectStore("messages").delete(k));
    Object.assign(rec, { messageCount: 0, nextSeq: 0, updatedAt: now });
    ps.push(sessions.put(rec), ...enqueue(this, tx, ops), tx.done);
    await settle(ps);
    this.notify("session", [sessionId]);
    return rec;
  }

  // ------------------------------------------------------------------ messages
  async appendMessages({ sessionId, records, now, create, ops }) {
    // seq is read and assigned inside this readwrite transaction: IndexedDB
    // serialises overlapping readwrite transactions, so two tabs never share one.
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const sessions = tx.objectStore("sessions");
    let sess = await sessions.get(sessionId);
    const created = !sess;
    if (!sess) {
      if (!create) {
        tx.abort();
        await tx.done.catch(() => {});
        throw new BridgeError("SessionNotFound", sessionId);
      }
      sess = { ...create, nextSeq: 0, messageCount: 0 };
    }
    let seq = sess.nextSeq ?? sess.messageCount ?? 0;
    const out = records.map((r) => ({ ...r, sessionId, seq: seq++ }));
    sess.nextSeq = seq;
    sess.messageCount = (sess.messageCount ?? 0) + out.length;
    sess.updatedAt = now;
    const messages = tx.objectStore("messages");
    const ps = out.map((m) => messages.add(m));
    ps.push(sessions.put(sess), ...enqueue(this, tx, ops, created), tx.done);
    await settle(ps).catch(duplicateId);
    this.notify("messages", [sessionId]);
    // the caller has the records: send back only what the transaction decided
    return [out.length ? out[0].seq : sess.nextSeq, sess];
  }

  async deleteMessages({ sessionId, messageIds, ops }) {
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const sessions = tx.objectStore("sessions");
    const messages = tx.objectStore("messages");
    const sess = await sessions.get(sessionId);
    if (!sess) {
      tx.abort();
      await tx.done.catch(() => {});
      throw new BridgeError("SessionNotFound", sessionId);
    }
    const ps = [];
    for (const id of messageIds) {
      const m = await messages.get(id);
      if (m && m.sessionId === sessionId) ps.push(messages.delete(id));
    }
    sess.messageCount = (sess.messageCount ?? 0) - ps.length;
    ps.push(sessions.put(sess), ...enqueue(this, tx, ops), tx.done);
    await settle(ps);
    this.notify("messages", [sessionId]);
    return sess;
  }

  async importSessions({ items, replace, ops }) {
    // strict durability: an import is a large, deliberate write
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite", "strict");
    const sessions = tx.objectStore("sessions");
    const messages = tx.objectStore("messages");
    const ps = [];
    const all = [];
    for (const [record, msgs] of items) {
      if (replace) {
        const keys = await messages.index("sessionSeq").getAllKeys(sessionRange(record.sessionId));
        for (const k of keys) ps.push(messages.delete(k));
        ps.push(sessions.delete(record.sessionId));
      }
      ps.push(sessions.add({ ...record, nextSeq: nextSeqAfter(msgs), messageCount: msgs.length }));
      for (const m of msgs) {
        ps.push(messages.add(m));
        all.push(m);
      }
    }
    ps.push(...enqueue(this, tx, ops), tx.done);
    await settle(ps).catch(duplicateId);
    this.notify("session", items.map(([r]) => r.sessionId));
    return null;
  }

  async getMessage({ messageId }) {
    return (await this.db.get("messages", messageId)) ?? null;
  }

  async getMessages({ messageIds }) {
    const store = this.tx(["messages"]).objectStore("messages");
    return await Promise.all(messageIds.map((id) => store.get(id).then((r) => r ?? null)));
  }

  async listMessages({ sessionId, offset, limit, newestFirst }) {
    const tx = this.tx(["sessions", "messages"]);
    const index = tx.objectStore("messages").index("sessionSeq");
    const sess = await tx.objectStore("sessions").get(sessionId);
    if (!sess) return [];
    const count = sess.messageCount ?? 0;
    const want = limit === null ? Infinity : limit;
    if (sess.nextSeq === count) {
      // dense seq 0..count-1: the page is a key range, no cursor walk
      let lo, hi;
      if (newestFirst) {
        hi = count - 1 - offset;
        lo = Math.max(0, hi - want + 1);
      } else {
        lo = offset;
        hi = Math.min(count - 1, offset + want - 1);
      }
      if (hi < lo || hi < 0) return [];
      const page = await index.getAll(IDBKeyRange.bound([sessionId, lo], [sessionId, hi]));
      return newestFirst ? page.reverse() : page;
    }
    const out = [];
    let cursor = await index.openCursor(sessionRange(sessionId), newestFirst ? "prev" : "next");
    if (cursor && offset > 0) cursor = await cursor.advance(offset);
    while (cursor && out.length < want) {
      out.push(cursor.value);
      cursor = await cursor.continue();
    }
    return out;
  }

  async countMessages({ sessionId }) {
    return await this.tx(["messages"]).objectStore("messages").index("sessionSeq").count(sessionRange(sessionId));
  }

  // ------------------------------------------------------------------ pulled changes
  // The rules of chatmem/sync/apply.py (read its docstring), in one transaction:
  // remote changes merged under the pending outbox operations, nothing enqueued,
  // and `kv` (the new cursor) written in the same transaction.
  async applyChanges({ changes, kv }) {
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const sessions = tx.objectStore("sessions");
    const messages = tx.objectStore("messages");
    const bySeq = messages.index("sessionSeq");
    const pending = new Map();
    for (const op of await tx.objectStore("outbox").getAll()) {
      const k = `${op.resource}\u0000${op.id}`;
      if (!pending.has(k)) pending.set(k, []);
      pending.get(k).push(op);
    }
    const touched = new Set();
    const ps = [];
    for (const c of changes) {
      const hlc = String(c.hlc);
      const newer = (pending.get(`${c.resource}\u0000${c.id}`) || []).filter((op) => String(op.hlc ?? "") > hlc);
      const isDelete = c.deleted || c.data == null;
      if (c.resource === "session") {
        if (isDelete) {
          if (newer.some((op) => op.type === "create")) continue;
          for (const k of await bySeq.getAllKeys(sessionRange(c.id))) ps.push(messages.delete(k));
          ps.push(sessions.delete(c.id));
          touched.add(c.id);
          continue;
        }
        if (newer.some((op) => op.type === "delete")) continue;
        const keep = new Set();
        for (const op of newer) if (op.data && typeof op.data === "object") for (const k of Object.keys(op.data)) keep.add(k);
        const local = await sessions.get(c.id);
        const rec = local ? { ...local } : placeholderSession(c.id, 0);
        for (const [k, value] of Object.entries(c.data)) {
          if (STORE_OWNED.has(k) || (local && keep.has(k))) continue;
          rec[k] = k === "updatedAt" && local ? Math.max(Number(local.updatedAt || 0), Number(value || 0)) : value;
        }
        rec.sessionId = c.id;
        ps.push(sessions.put(rec));
        touched.add(c.id);
        continue;
      }
      if (isDelete) {
        const old = await messages.get(c.id);
        if (!old) continue;
        ps.push(messages.delete(c.id));
        const sess = await sessions.get(old.sessionId);
        if (sess) {
          sess.messageCount = Math.max(0, Number(sess.messageCount || 0) - 1);
          ps.push(sessions.put(sess));
        }
        touched.add(old.sessionId);
        continue;
      }
      if ((await messages.get(c.id)) || newer.some((op) => op.type === "delete")) continue;
      const data = { ...c.data, id: c.id };
      const sid = data.sessionId;
      const created = Number(data.createdAt || 0);
      const sess = (await sessions.get(sid)) || placeholderSession(sid, created);
      const nextSeq = Number(sess.nextSeq ?? sess.messageCount ?? 0);
      let seq = data.seq;
      if (!Number.isInteger(seq) || seq < 0 || (await bySeq.count([sid, seq])) > 0) seq = nextSeq;
      data.seq = seq;
      sess.nextSeq = Math.max(nextSeq, seq + 1);
      sess.messageCount = Number(sess.messageCount || 0) + 1;
      sess.updatedAt = Math.max(Number(sess.updatedAt || 0), created);
      ps.push(sessions.put(sess), messages.put(data));
      touched.add(sid);
    }
    for (const [k, v] of Object.entries(kv || {})) ps.push(tx.objectStore("kv").put(v, k));
    ps.push(tx.done);
    await settle(ps);
    if (touched.size) this.notify("session", [...touched]);
    return [...touched];
  }

  // ------------------------------------------------------------------ kv
  async kvGet({ key }) {
    return (await this.db.get("kv", key)) ?? null;
  }

  async kvSet({ key, value }) {
    const tx = this.tx(["kv"], "readwrite");
    await settle([tx.objectStore("kv").put(value, key), tx.done]);
    return null;
  }

  // ------------------------------------------------------------------ outbox
  // Turn the outbox on for good; returns the snapshot of every session's nextSeq
  // taken in the same transaction (what the backfill uploads).
  async outboxActivate({ now }) {
    const tx = this.tx(["sessions", "kv"], "readwrite", "strict");
    const kv = tx.objectStore("kv");
    let snap = await kv.get(OUTBOX_KEY);
    if (snap === undefined) {
      const pairs = (await tx.objectStore("sessions").getAll())
        .map((s) => [s.sessionId, s.nextSeq ?? s.messageCount ?? 0]);
      pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      snap = { at: now, sessions: pairs };
      kv.put(snap, OUTBOX_KEY);
    }
    await tx.done;
    this.outboxOn = true;
    return snap;
  }

  async outboxPut({ ops }) {
    const tx = this.tx(["outbox"], "readwrite");
    const outbox = tx.objectStore("outbox");
    await settle([...ops.map((op) => outbox.add(op)), tx.done]);
    return null;
  }

  async outboxList({ limit }) {
    return await this.tx(["outbox"]).objectStore("outbox").getAll(null, limit ?? undefined);
  }

  async outboxUpdate({ ops }) {
    const tx = this.tx(["outbox"], "readwrite");
    const index = tx.objectStore("outbox").index("op_id");
    const ps = [];
    for (const op of ops) {
      const key = await index.getKey(op.op_id);
      if (key !== undefined) ps.push(tx.objectStore("outbox").put({ ...op, key }));
    }
    ps.push(tx.done);
    await settle(ps);
    return null;
  }

  async outboxAck({ opIds }) {
    const tx = this.tx(["outbox"], "readwrite");
    const index = tx.objectStore("outbox").index("op_id");
    const ps = [];
    for (const id of opIds) {
      const key = await index.getKey(id);
      if (key !== undefined) ps.push(tx.objectStore("outbox").delete(key));
    }
    ps.push(tx.done);
    await settle(ps);
    return null;
  }

  async outboxToDead({ entries }) {
    const tx = this.tx(["outbox", "dead_letter"], "readwrite");
    const index = tx.objectStore("outbox").index("op_id");
    const ps = [];
    for (const e of entries) {
      const key = await index.getKey(e.op_id);
      if (key !== undefined) ps.push(tx.objectStore("outbox").delete(key));
      const { key: _drop, ...rest } = e;
      ps.push(tx.objectStore("dead_letter").put(rest));
    }
    ps.push(tx.done);
    await settle(ps);
    return null;
  }

  async deadList() {
    return await this.tx(["dead_letter"]).objectStore("dead_letter").getAll();
  }

  async deadReplay({ opIds }) {
    const tx = this.tx(["outbox", "dead_letter"], "readwrite");
    const dead = tx.objectStore("dead_letter");
    const all = await dead.getAll();
    const wanted = opIds === null ? all : all.filter((e) => opIds.includes(e.op_id));
    const ps = [];
    for (const e of wanted) {
      const { reason: _r, response: _p, key: _k, ...op } = e;
      ps.push(dead.delete(e.op_id), tx.objectStore("outbox").add({ ...op, attempts: 0, next_attempt_at: 0, last_error: null }));
    }
    ps.push(tx.done);
    await settle(ps);
    return wanted.length;
  }

  async deadDiscard({ opIds }) {
    const tx = this.tx(["dead_letter"], "readwrite");
    const dead = tx.objectStore("dead_letter");
    const keys = opIds === null ? await dead.getAllKeys() : opIds;
    let n = 0;
    const ps = [];
    for (const k of keys) {
      if ((await dead.count(k)) > 0) n++;
      ps.push(dead.delete(k));
    }
    ps.push(tx.done);
    await settle(ps);
    return n;
  }

  async outboxCounts() {
    const tx = this.tx(["outbox", "dead_letter"]);
    return [await tx.objectStore("outbox").count(), await tx.objectStore("dead_letter").count()];
  }

  async close() {
    this.closed = true;
    this.closedReason = "closed";
    if (this.channel) this.channel.close();
    this.db.close();
    return null;
  }

  // ------------------------------------------------------------------ the one entry point
  async call(method, argsJson) {
    try {
      if (method.startsWith("_") || typeof this[method] !== "function" || method === "call") {
        throw new BridgeError("NotSupportedError", `unknown bridge method ${method}`);
      }
      const value = await this[method](argsJson ? JSON.parse(argsJson) : {});
      return JSON.stringify({ ok: true, value });
    } catch (e) {
      return JSON.stringify({ ok: false, error: { name: e?.name || "Error", message: e?.message || String(e) } });
    }
  }

  subscribe(fn) {
    this.listeners.push(fn);
  }
}

function duplicateId(e) {
  // the only ConstraintError an add can raise here is a key that exists
  if (e?.name === "ConstraintError") throw new BridgeError("DuplicateId", e.message);
  throw e;
}

/** Open (creating or migrating) the database `name`. Resolves to a Database. */
export async function open(name, durability = "relaxed") {
  let blockedTimer = null;
  let rejectBlocked;
  const blocked = new Promise((_, reject) => (rejectBlocked = reject));
  const opening = openDB(name, SCHEMA_VERSION, {
    upgrade(db, oldVersion, _newVersion, transaction) {
      for (let v = oldVersion; v < SCHEMA_VERSION; v++) SCHEMA[v](db, transaction);
    },
    blocked() {
      blockedTimer = setTimeout(
        () => rejectBlocked(new BridgeError("UpgradeBlocked", "another tab keeps an older version open; close it or reload it")),
        BLOCKED_TIMEOUT_MS,
      );
    },
    blocking() {
      // another tab upgrades: let it, and tell this page to reload
      wrapper.closed = true;
      wrapper.closedReason = "the database was upgraded in another tab: reload this page";
      wrapper.db.close();
      globalThis.dispatchEvent?.(new CustomEvent("chatmem:versionchange", { detail: { name } }));
    },
  });
  let db;
  try {
    db = await Promise.race([opening, blocked]);
  } catch (e) {
    throw e;
  } finally {
    clearTimeout(blockedTimer);
  }
  const wrapper = new Database(name, db, durability === "strict" ? "strict" : "relaxed");
  return wrapper;
}

/** Open and answer with a JSON envelope (never rejects): {"ok", "value"|"error"}. */
export async function openEnvelope(name, durability) {
  try {
    return { ok: true, db: await open(name, durability), error: null };
  } catch (e) {
    return { ok: false, db: null, error: JSON.stringify({ name: e?.name || "Error", message: e?.message || String(e) }) };
  }
}

export async function drop(name) {
  await deleteDB(name);
}

export async function storageEstimate() {
  const est = (await navigator.storage?.estimate?.()) || {};
  const persisted = (await navigator.storage?.persisted?.()) || false;
  return JSON.stringify({ usage: est.usage ?? null, quota: est.quota ?? null, persisted });
}

export async function requestPersistence() {
  return (await navigator.storage?.persist?.()) || false;
}

// ---------------------------------------------------------------------------- DuckDB-Wasm
// The query index's engine: one DuckDB-Wasm database (the `eh` build) in a
// worker. Extensions are never autoloaded (they would reach the internet).
// Results cross as JSON {columns, rows}; bulk loads go through Arrow.

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

  /** Interrupt the query in flight (if any); resolves once the engine took the request. */
  async cancel() {
    this.cancelled = true;
    try {
      await this.conn.cancelSent();
    } catch (_) { /* nothing in flight */ }
    return null;
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
    for (const st of this.statements.values()) await st.close();
    await this.conn.close();
    await this.db.terminate();
    return null;
  }

  async call(method, argsJson) {
    try {
      if (this.closed) throw new BridgeError("DatabaseClosed", "the query index is closed");
      if (!["execute", "executemany", "loadRows", "close", "cancel"].includes(method)) {
        throw new BridgeError("NotSupportedError", `unknown engine method ${method}`);
      }
      const value = await this[method](argsJson ? JSON.parse(argsJson) : {});
      return JSON.stringify({ ok: true, value });
    } catch (e) {
      return JSON.stringify({ ok: false, error: { name: e?.name || "Error", message: e?.message || String(e) } });
    }
  }
}

/**
 * Start DuckDB-Wasm from this site (no network): resolves to an engine handle.
 * `path` null: an in-memory database; `opfs://name.duckdb`: a database file in
 * the origin's private file system (one tab at a time can hold it: a second
 * open rejects with `{name: "IndexLocked"}` and leaves no worker behind).
 */
export async function duckdbOpen(path = null) {
  const duckdb = await import("@duckdb/duckdb-wasm");
  const arrow = await import("apache-arrow");
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
    // no files (registered or OPFS), no network, and no SET that could undo it
    await conn.query("SET enable_external_access=false");
    await conn.query("SET lock_configuration=true");
  } catch (e) {
    try { await db.terminate(); } catch (_) { /* already gone */ }
    throw new BridgeError(path ? "IndexLocked" : "Error", `${path || "duckdb"}: ${e?.message || e}`);
  }
  const duck = new Duck(duckdb, arrow, db, conn);
  duck.path = path;
  return duck;
}

/** `duckdbOpen` as an envelope: `{ok, engine}` or `{ok: false, error: JSON}` (for Python). */
export async function duckdbOpenEnvelope(path = null) {
  try {
    return { ok: true, engine: await duckdbOpen(path) };
  } catch (e) {
    return { ok: false, error: JSON.stringify({ name: e?.name || "Error", message: e?.message || String(e) }) };
  }
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

// ---------------------------------------------------------------------------- exact token counts
// OpenAI-family BPE encodings from gpt-tokenizer (ranks bundled in the site,
// fetched from it on first use only).
const ENCODINGS = new Set(["o200k_base", "cl100k_base"]);

export async function tokenCounter(encoding) {
  if (!ENCODINGS.has(encoding)) throw new BridgeError("NotSupportedError", `unknown encoding ${encoding}`);
  const mod = await import(here(`../vendor/gpt-tokenizer/esm/encoding/${encoding}.js`));
  return (text) => mod.countTokens(text);
}

// ---------------------------------------------------------------------------- sync helpers

/** Take the Web Lock `name` if nobody holds it (never waits). Resolves to a
 *  release function, or false when another tab holds it. Without Web Locks
 *  (very old browsers) every caller gets a release function. */
export function tryLock(name) {
  if (!globalThis.navigator?.locks) return Promise.resolve(() => Promise.resolve());
  return new Promise((resolve, reject) => {
    // the release function answers a promise that settles once the lock is free again,
    // so the same tab can take it again right after (push, then pull)
    const done = navigator.locks.request(name, { ifAvailable: true }, (lock) => {
      if (!lock) {
        resolve(false);
        return undefined;
      }
      return new Promise((release) => resolve(() => {
        release();
        return done;
      }));
    });
    done.catch(reject);
  });
}

/** navigator.onLine (true where the browser does not say). */
export function isOnline() {
  return globalThis.navigator?.onLine ?? true;
}

/** Call `fn()` on every `online` event; returns a function that stops it. */
export function onOnline(fn) {
  const handler = () => {
    try { fn(); } catch (e) { console.error(e); }
  };
  globalThis.addEventListener?.("online", handler);
  return () => globalThis.removeEventListener?.("online", handler);
}
