// The in-page side of the benchmark: the JavaScript systems chatmem is compared
// with, driven by the same seeded messages, plus timing helpers that the Python
// side (bench/benchpy.py, running in the page's Pyodide) uses too.
//
// Systems (each in its own database, all in this page):
//   raw       plain IndexedDB through `idb`, the same operations chatmem performs
//             (session get+put, one message record, one outbox record) in one transaction,
//             with only the index the operations need ([sessionId, seq])
//   rawschema the same, on chatmem's exact schema (all its indexes) and record shapes
//   rawmin    no outbox: W1 one put of the message record only (the floor); W2 the
//             message records and the session counter in one transaction
//   dexie    Dexie: a transaction with the message add and the session counter; bulkPut; where()
//   rewrite  the original's storage model: unstorage + its IndexedDB driver, the whole
//            session as one record, rewritten on every append
import { openDB, deleteDB } from "idb";
import Dexie from "dexie";
import { createStorage } from "unstorage";
import indexedDbDriver from "unstorage/drivers/indexedb";
import { SCHEMA } from "../js/schema.js";
import * as payloads from "./payloads.js";

const now = () => performance.now();

// ---------------------------------------------------------------- heartbeat (main-thread blocking)
// A MessageChannel ping-pong records a tick whenever the main thread is free to run a task;
// the gap between two ticks is how long the thread was held by something else.
const hb = { ticks: [], running: false, port: null };
export function hbStart() {
  const ch = new MessageChannel();
  hb.ticks = [];
  hb.running = true;
  ch.port1.onmessage = () => {
    hb.ticks.push(now());
    if (hb.running) ch.port2.postMessage(0);
  };
  hb.port = ch;
  ch.port2.postMessage(0);
}
/** Stop; for each [start, end] interval: the longest gap and the sum of gaps >= 0.2 ms. */
export function hbStop(intervalsJson) {
  hb.running = false;
  const intervals = typeof intervalsJson === "string" ? JSON.parse(intervalsJson) : intervalsJson;
  const t = hb.ticks;
  const out = [];
  let i = 0;
  for (const [s, e] of intervals) {
    while (i < t.length && t[i] < s) i++;
    let prev = s, max = 0, sum = 0, j = i;
    while (j < t.length && t[j] <= e) {
      const g = t[j] - prev;
      if (g > max) max = g;
      if (g >= 0.2) sum += g;
      prev = t[j++];
    }
    const g = e - prev;
    if (g > max) max = g;
    if (g >= 0.2) sum += g;
    out.push([max, sum]);
  }
  return JSON.stringify(out);
}
const tick = () => new Promise((r) => setTimeout(r, 0));

// ---------------------------------------------------------------- systems
const clone = (m) => ({ ...m });

// a message and its outbox op shaped as chatmem stores them
function chatmemShape(rec) {
  const full = { tokenCount: Math.ceil(rec.content.length / 4), provider: null, model: null, slices: null,
    tool_results: null, categorization: null, toolCalls: rec.toolCalls ?? null, toolCallId: rec.toolCallId ?? null,
    name: null, metadata: null, ...rec };
  const op = { op_id: "o" + rec.id, type: "create", resource: "message", id: rec.id, session_id: rec.sessionId,
    data: full, timestamp: Date.now(), hlc: `${Date.now()}:0000:dbench`, attempts: 0, next_attempt_at: 0, last_error: null };
  return [full, op];
}

function rawSystem(withOutbox, sameSchema = false) {
  return {
    async open(name, durability) {
      this.durability = durability;
      this.db = await openDB(name, 1, {
        upgrade(db, _old, _new, tx) {
          if (sameSchema) { // the indexes every chatmem write maintains
            for (const step of SCHEMA) step(db, tx);
            return;
          }
          db.createObjectStore("sessions", { keyPath: "sessionId" });
          const ms = db.createObjectStore("messages", { keyPath: "id" });
          ms.createIndex("sessionSeq", ["sessionId", "seq"], { unique: true });
          db.createObjectStore("outbox", { keyPath: "key", autoIncrement: true });
        },
      });
    },
    async createSession(sid) {
      await this.db.put("sessions", { sessionId: sid, nextSeq: 0, messageCount: 0, updatedAt: Date.now() });
    },
    async bulk(sid, msgs) {
      const tx = this.db.transaction(["sessions", "messages", "outbox"], "readwrite", { durability: this.durability });
      const ss = tx.objectStore("sessions"), ms = tx.objectStore("messages"), ob = tx.objectStore("outbox");
      const sess = await ss.get(sid);
      let seq = sess.nextSeq;
      const ps = [];
      for (const m of msgs) {
        const rec = { ...m, id: `${sid}/${m.id}`, sessionId: sid, seq: seq++, createdAt: Date.now() };
        if (sameSchema) {
          const [full, op] = chatmemShape(rec);
          ps.push(ms.add(full), ob.add(op));
          continue;
        }
        ps.push(ms.add(rec));
        if (withOutbox) ps.push(ob.add({ opId: "o" + rec.id, type: "create", resource: "message", id: rec.id, data: rec }));
      }
      sess.nextSeq = seq;
      sess.messageCount += msgs.length;
      sess.updatedAt = Date.now();
      ps.push(ss.put(sess), tx.done);
      await Promise.all(ps);
    },
    async append(sid, m) {
      return this.bulk(sid, [m]);
    },
    async recent(sid, k) {
      const tx = this.db.transaction(["sessions", "messages"]);
      const sess = await tx.objectStore("sessions").get(sid);
      const hi = sess.nextSeq - 1;
      const page = await tx.objectStore("messages").index("sessionSeq").getAll(IDBKeyRange.bound([sid, Math.max(0, hi - k + 1)], [sid, hi]));
      return page;
    },
    async exportAll() {
      const tx = this.db.transaction(["sessions", "messages"]);
      const sessions = await tx.objectStore("sessions").getAll();
      const idx = tx.objectStore("messages").index("sessionSeq");
      const out = [];
      for (const s of sessions) {
        out.push({ ...s, messages: await idx.getAll(IDBKeyRange.bound([s.sessionId, -Infinity], [s.sessionId, Infinity])) });
      }
      return JSON.stringify({ sessions: out });
    },
    async close() { this.db.close(); },
  };
}

function rawMinSystem() {
  const sys = rawSystem(false);
  sys.append = async function (sid, m) {
    const tx = this.db.transaction("messages", "readwrite", { durability: this.durability });
    await Promise.all([tx.store.put({ ...m, sessionId: sid, seq: this.seq = (this.seq ?? 1e9) + 1 }), tx.done]);
  };
  return sys;
}

function dexieSystem() {
  return {
    async open(name, durability) {
      this.db = new Dexie(name, { chromeTransactionDurability: durability });
      this.db.version(1).stores({ sessions: "sessionId", messages: "id, [sessionId+seq]" });
      await this.db.open();
    },
    async createSession(sid) {
      await this.db.sessions.put({ sessionId: sid, nextSeq: 0, messageCount: 0, updatedAt: Date.now() });
    },
    async bulk(sid, msgs) {
      const db = this.db;
      await db.transaction("rw", db.sessions, db.messages, async () => {
        const sess = await db.sessions.get(sid);
        let seq = sess.nextSeq;
        const recs = msgs.map((m) => ({ ...m, id: `${sid}/${m.id}`, sessionId: sid, seq: seq++, createdAt: Date.now() }));
        sess.nextSeq = seq;
        sess.messageCount += recs.length;
        sess.updatedAt = Date.now();
        await db.messages.bulkPut(recs);
        await db.sessions.put(sess);
      });
    },
    async append(sid, m) {
      const db = this.db;
      await db.transaction("rw", db.sessions, db.messages, async () => {
        const sess = await db.sessions.get(sid);
        await db.messages.add({ ...m, id: `${sid}/${m.id}`, sessionId: sid, seq: sess.nextSeq, createdAt: Date.now() });
        sess.nextSeq += 1;
        sess.messageCount += 1;
        sess.updatedAt = Date.now();
        await db.sessions.put(sess);
      });
    },
    async recent(sid, k) {
      const sess = await this.db.sessions.get(sid);
      const hi = sess.nextSeq - 1;
      return await this.db.messages.where("[sessionId+seq]").between([sid, Math.max(0, hi - k + 1)], [sid, hi], true, true).toArray();
    },
    async exportAll() {
      const sessions = await this.db.sessions.toArray();
      const out = [];
      for (const s of sessions) {
        out.push({ ...s, messages: await this.db.messages.where("[sessionId+seq]").between([s.sessionId, Dexie.minKey], [s.sessionId, Dexie.maxKey]).toArray() });
      }
      return JSON.stringify({ sessions: out });
    },
    async close() { this.db.close(); },
  };
}

// The unstorage driver (idb-keyval) opens its connection lazily and never exposes it;
// note every connection by database name so that a system can release its database.
const connections = new Map();
const factoryOpen = IDBFactory.prototype.open;
IDBFactory.prototype.open = function (name, ...rest) {
  const req = factoryOpen.call(this, name, ...rest);
  if (String(name).startsWith("bench-rewrite")) req.addEventListener("success", () => {
    if (!connections.has(name)) connections.set(name, []);
    connections.get(name).push(req.result);
  });
  return req;
};

function rewriteSystem() {
  // As the original: createStorage() with a memory driver, IndexedDB mounted at "local";
  // the chat store keeps each session's messages in memory and writes the whole array back.
  return {
    async open(name) {
      this.name = name;
      this.storage = createStorage();
      this.storage.mount("local", indexedDbDriver({ base: "airi-local", dbName: name, storeName: "keyval" }));
      this.sessions = new Map();
    },
    key: (sid) => `local:chat:sessions:${sid}:messages`,
    async createSession(sid) {
      this.sessions.set(sid, []);
      await this.storage.setItem(`local:chat:sessions:${sid}:meta`, { sessionId: sid, updatedAt: Date.now() });
      await this.storage.setItem(this.key(sid), []);
    },
    async bulk(sid, msgs) {
      const arr = this.sessions.get(sid);
      for (const m of msgs) arr.push({ ...m, createdAt: Date.now() });
      await this.storage.setItem(this.key(sid), arr);
    },
    async append(sid, m) {
      const arr = this.sessions.get(sid);
      arr.push({ ...m, createdAt: Date.now() });
      await this.storage.setItem(this.key(sid), arr);
    },
    async recent(sid, k) {
      const arr = await this.storage.getItem(this.key(sid));
      return arr.slice(-k);
    },
    async exportAll(sessionIds) {
      // the app knows its session ids (getKeys() cannot list them back: with the driver's
      // `base` option the keys it returns carry a prefix unstorage does not strip)
      const out = {};
      for (const sid of sessionIds) {
        out[sid] = {
          meta: await this.storage.getItem(`local:chat:sessions:${sid}:meta`),
          messages: await this.storage.getItem(this.key(sid)),
        };
      }
      return JSON.stringify(out);
    },
    async close() {
      await this.storage.dispose();
      for (const c of connections.get(this.name) ?? []) c.close();
      connections.delete(this.name);
    },
  };
}

export const SYSTEMS = { raw: () => rawSystem(true), rawschema: () => rawSystem(true, true), rawmin: rawMinSystem, dexie: dexieSystem, rewrite: rewriteSystem };

// ---------------------------------------------------------------- workloads
const state = { msgs: new Map() };
function gen(seed, n) {
  const key = `${seed}:${n}`;
  if (!state.msgs.has(key)) state.msgs.set(key, payloads.messages(seed, n));
  return state.msgs.get(key);
}
export function payloadJson(seed, n) { return JSON.stringify(gen(seed, n)); }
export function checksum(seed, n) { return payloads.checksum(gen(seed, n)); }

async function fresh(system, db, durability) {
  await deleteDB(db);
  const s = SYSTEMS[system]();
  await s.open(db, durability);
  return s;
}

/** W1: prefill `base` messages (untimed, in batches), warm up, then time `reps` appends, each awaited. */
export async function w1(system, { db, durability, seed, base, warmup, reps, blocking }) {
  const s = await fresh(system, db, durability);
  const sid = "s-w1";
  await s.createSession(sid);
  const msgs = gen(seed, base + warmup + reps);
  for (let i = 0; i < base; i += 1000) await s.bulk(sid, msgs.slice(i, Math.min(base, i + 1000)));
  for (let i = 0; i < warmup; i++) await s.append(sid, clone(msgs[base + i]));
  await tick();
  const times = [];
  const intervals = [];
  if (blocking) hbStart();
  for (let i = 0; i < reps; i++) {
    const m = clone(msgs[base + warmup + i]);
    const t0 = now();
    await s.append(sid, m);
    const t1 = now();
    times.push(t1 - t0);
    intervals.push([t0, t1]);
  }
  const block = blocking ? JSON.parse(hbStop(intervals)) : null;
  await s.close();
  await deleteDB(db);
  return { times, block };
}

/** W2: import n messages into a new session as one call (rewrite: one record), `reps` times. */
export async function w2(system, { db, durability, seed, n, reps, keep }) {
  const s = await fresh(system, db, durability);
  const msgs = gen(seed, n);
  const times = [];
  for (let r = 0; r < reps; r++) {
    const sid = `s-w2-${r}`;
    await s.createSession(sid);
    const batch = msgs.map(clone);
    const t0 = now();
    for (let i = 0; i < batch.length; i += 10000) await s.bulk(sid, batch.slice(i, i + 10000));
    times.push(now() - t0);
    await tick();
  }
  await s.close();
  if (!keep) await deleteDB(db);
  return { times };
}

/** W3 (store side): read the newest k messages of a session; the JS walk picks what fits the budget. */
export async function w3(system, { db, durability, seed, n, k, budget, reps }) {
  const s = await fresh(system, db, durability);
  const sid = "s-w3";
  await s.createSession(sid);
  const msgs = gen(seed, n);
  for (let i = 0; i < n; i += 10000) await s.bulk(sid, msgs.slice(i, i + 10000));
  const times = [];
  let kept = 0;
  for (let r = 0; r < reps; r++) {
    const t0 = now();
    const page = await s.recent(sid, k);
    let used = 0;
    kept = 0;
    for (let i = page.length - 1; i >= 0; i--) {
      const t = 4 + Math.ceil(page[i].content.length / 4);
      if (used + t > budget) break;
      used += t;
      kept++;
    }
    times.push(now() - t0);
  }
  await s.close();
  await deleteDB(db);
  return { times, kept };
}

/** W5: export everything in the database left by W2 (keep=true) as one JSON string. */
export async function w5(system, { db, durability, reps, sessions }) {
  const s = SYSTEMS[system]();
  await s.open(db, durability);
  if (system === "rewrite") {
    // the rewrite model keeps sessions in memory; re-read what is stored
    s.sessions = new Map();
  }
  const times = [];
  let bytes = 0;
  for (let r = 0; r < reps; r++) {
    const t0 = now();
    const json = await s.exportAll(Array.from({ length: sessions }, (_, r) => `s-w2-${r}`));
    times.push(now() - t0);
    bytes = json.length;
  }
  await s.close();
  await deleteDB(db);
  return { times, bytes };
}

/** Profiling: replace a chatmem bridge handle's `call` with one that times JSON.parse,
 * the method (its IndexedDB transaction included) and JSON.stringify separately. */
export function instrument(db) {
  const parts = [];
  db.call = async function (method, argsJson, extra) {
    const t0 = now();
    const args = argsJson ? JSON.parse(argsJson) : {};
    const t1 = now();
    const value = await this[method](args, extra);
    const t2 = now();
    const out = JSON.stringify({ ok: true, value });
    parts.push([t1 - t0, t2 - t1, now() - t2]);
    return out;
  };
  return { take: () => JSON.stringify(parts.splice(0)) };
}

export async function drop(db) { await deleteDB(db); }
