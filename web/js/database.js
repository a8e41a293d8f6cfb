// The IndexedDB database of one chatmem store (through `idb`).
//
// Rules:
// - One call = one IndexedDB transaction. Python never awaits inside one:
//   every call carries its whole batch, and resolves only once the
//   transaction has completed (`tx.done`), so an acknowledged write is durable.
// - Arguments and results cross as JSON text, in the envelope of envelope.js.
// - Writes post a notice on a BroadcastChannel so other tabs drop stale caches.

import { openDB, deleteDB } from "idb";

import { applyChanges, closeUp } from "./apply-changes.js";
import { BridgeError, callMethod, opened } from "./envelope.js";
import { OUTBOX_KEY, SCHEMA, SCHEMA_VERSION, sessionRange } from "./schema.js";
import {
  BatchAppend, BatchImport, KnownSessions, addImported, appendMessages, duplicateId, enqueue, firstError, missing, nextSeqAfter,
  settle,
} from "./writes.js";

const BLOCKED_TIMEOUT_MS = 5000;
/** the most session records one page of `allSessions` holds */
const SESSIONS_PAGE = 1000;
class Database {
  constructor(name, db, durability) {
    this.name = name;
    this.db = db;
    this.durability = durability;
    this.closed = false;
    this.closedReason = null;
    this.listeners = [];
    this.known = new KnownSessions();
    this.channel = typeof BroadcastChannel === "function" ? new BroadcastChannel(`chatmem:${name}`) : null;
    if (this.channel) {
      this.channel.onmessage = (ev) => {
        for (const sid of ev.data?.sessions ?? []) this.known.delete(sid);
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
    this.known.remember(rec);
    this.notify("session", [record.sessionId]);
    return null;
  }

  async getSession({ sessionId }) {
    return (await this.db.get("sessions", sessionId)) ?? null;
  }

  /** Every session record, as JSON texts of up to `SESSIONS_PAGE` records each: read page
   *  by page in one transaction (one snapshot), so no single read, JSON text or parse of
   *  them in Python holds the page's thread long (10,000 sessions at once held it for
   *  about 100 ms, and Python's parse another 50). */
  async allSessions() {
    const store = this.tx(["sessions"]).objectStore("sessions");
    const pages = [];
    for (let after = null; ;) {
      const page = await store.getAll(after === null ? null : IDBKeyRange.lowerBound(after, true), SESSIONS_PAGE);
      if (page.length) pages.push(JSON.stringify(page));
      if (page.length < SESSIONS_PAGE) return pages;
      after = page[page.length - 1].sessionId;
    }
  }

  async updateSession({ sessionId, changes, ops }) {
    const tx = this.tx(["sessions", "outbox", "kv"], "readwrite");
    const store = tx.objectStore("sessions");
    const rec = await store.get(sessionId);
    if (!rec) {
      await missing(tx, sessionId);
    }
    Object.assign(rec, changes);
    await settle([store.put(rec), ...enqueue(this, tx, ops), tx.done]);
    this.known.remember(rec);
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
    this.known.delete(sessionId);
    await settle(ps);
    this.notify("session", [sessionId]);
    return existed;
  }

  async clearSession({ sessionId, now, ops }) {
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const sessions = tx.objectStore("sessions");
    const rec = await sessions.get(sessionId);
    if (!rec) {
      await missing(tx, sessionId);
    }
    const keys = await tx.objectStore("messages").index("sessionSeq").getAllKeys(sessionRange(sessionId));
    const ps = keys.map((k) => tx.objectStore("messages").delete(k));
    Object.assign(rec, { messageCount: 0, nextSeq: 0, updatedAt: now });
    ps.push(sessions.put(rec), ...enqueue(this, tx, ops), tx.done);
    await settle(ps);
    this.known.remember(rec);
    this.notify("session", [sessionId]);
    return rec;
  }

  // ------------------------------------------------------------------ messages
  async appendMessages(args, opsLater) {
    return await appendMessages(this, { ...args, ops: args.ops ?? opsLater });
  }

  /** A batch append fed in chunks (writes.js `BatchAppend`): called directly, not through `call`. */
  batchAppend(sessionId) {
    return new BatchAppend(this, sessionId);
  }

  batchImport() {
    return new BatchImport(this);
  }

  async deleteMessages({ sessionId, messageIds, ops }) {
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
    const sessions = tx.objectStore("sessions");
    const messages = tx.objectStore("messages");
    const sess = await sessions.get(sessionId);
    if (!sess) {
      await missing(tx, sessionId);
    }
    const ps = [];
    let from = Number(sess.messageCount ?? 0);
    for (const id of messageIds) {
      const m = await messages.get(id);
      if (m && m.sessionId === sessionId) {
        ps.push(messages.delete(id));
        from = Math.min(from, Number(m.seq));
      }
    }
    // the positions after the first one deleted close up: seq stays dense
    sess.messageCount = sess.nextSeq = await closeUp(messages, sessionId, from, ps);
    ps.push(sessions.put(sess), ...enqueue(this, tx, ops), tx.done);
    await settle(ps);
    this.known.remember(sess);
    this.notify("messages", [sessionId]);
    return sess;
  }

  async importSessions({ items, replace, ops }, opsLater) {
    ops = ops ?? opsLater;
    // strict durability: an import is a large, deliberate write
    const tx = this.tx(["sessions", "messages", "outbox", "kv"], "readwrite", "strict");
    const sessions = tx.objectStore("sessions");
    const messages = tx.objectStore("messages");
    const failed = firstError(tx);
    const ps = [];
    try {
      for (const [record, msgs] of items) {
        if (replace) {
          const keys = await messages.index("sessionSeq").getAllKeys(sessionRange(record.sessionId));
          for (const k of keys) ps.push(messages.delete(k));
          ps.push(sessions.delete(record.sessionId));
        }
        addImported(this, tx, record, msgs);  // bare requests, as a batch import's
      }
      ps.push(...enqueue(this, tx, ops), tx.done);
      await settle(ps);
    } catch (e) {
      // nothing is written: a failed add aborted the transaction already; anything else aborts it here
      try { tx.abort(); } catch { /* already aborted */ }
      for (const p of [...ps, tx.done]) p.catch(() => {});
      duplicateId(failed.error ?? e);
    }
    this.notify("session", items.map(([r]) => r.sessionId));
    return null;
  }

  // ------------------------------------------------------------------ facts
  async putFacts({ records, ops }) {
    const tx = this.tx(["facts", "outbox", "kv"], "readwrite");
    const ps = records.map((r) => tx.objectStore("facts").put(r));
    ps.push(...enqueue(this, tx, ops), tx.done);
    await settle(ps);
    this.notify("facts", []);
    return null;
  }

  async getFact({ factId }) {
    return (await this.db.get("facts", factId)) ?? null;
  }

  async listFacts({ userId }) {
    const tx = this.tx(["facts"]);
    const facts = tx.objectStore("facts");
    return userId == null ? await facts.getAll() : await facts.index("userId").getAll(userId);
  }

  async deleteFacts({ factIds, ops }) {
    const tx = this.tx(["facts", "outbox", "kv"], "readwrite");
    const facts = tx.objectStore("facts");
    let n = 0;
    const ps = [];
    for (const id of new Set(factIds)) {
      if ((await facts.count(id)) > 0) {
        n += 1;
        ps.push(facts.delete(id));
      }
    }
    ps.push(...enqueue(this, tx, ops), tx.done);
    await settle(ps);
    this.notify("facts", []);
    return n;
  }

  async getMessage({ messageId }) {
    return (await this.db.get("messages", messageId)) ?? null;
  }

  async getMessages({ messageIds }) {
    const store = this.tx(["messages"]).objectStore("messages");
    return await Promise.all(messageIds.map((id) => store.get(id).then((r) => r ?? null)));
  }

  /** Every message of each session, the sessions in the given order, each by seq: one
   *  transaction (a derivation reads the store this way, many small sessions a call). */
  async listSessionsMessages({ sessionIds }) {
    const index = this.tx(["messages"]).objectStore("messages").index("sessionSeq");
    const pages = await Promise.all(sessionIds.map((sid) => index.getAll(sessionRange(sid))));
    return pages.flat();
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

  async messageIds({ sessionId }) {
    return await this.tx(["messages"]).objectStore("messages").index("sessionSeq").getAllKeys(sessionRange(sessionId));
  }

  async countMessages({ sessionId }) {
    return await this.tx(["messages"]).objectStore("messages").index("sessionSeq").count(sessionRange(sessionId));
  }

  // ------------------------------------------------------------------ pulled changes
  async applyChanges({ changes, kv }) {
    const tx = this.tx(["sessions", "messages", "facts", "outbox", "kv"], "readwrite");
    const touched = await applyChanges(tx, changes, kv);
    for (const sid of touched) this.known.delete(sid);
    if (touched.length) this.notify("session", touched);
    if (changes.some((c) => c.resource === "fact")) this.notify("facts", []);
    return touched;
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
  // `opsLater` (optional): a function answering the write's outbox ops as JSON text,
  // called inside the transaction only if the outbox is on (Python builds them then)
  call(method, argsJson, opsLater) {
    return callMethod(this, DATABASE_METHODS, method, argsJson, undefined, opsLater);
  }

  subscribe(fn) {
    this.listeners.push(fn);
  }
}

/** What Python may call: every method but the plumbing. */
const DATABASE_METHODS = new Set(Object.getOwnPropertyNames(Database.prototype).filter(
  (n) => !n.startsWith("_") && !["constructor", "call", "subscribe", "tx", "notify", "batchAppend", "batchImport"].includes(n)));

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
  } finally {
    clearTimeout(blockedTimer);
  }
  const wrapper = new Database(name, db, durability === "strict" ? "strict" : "relaxed");
  return wrapper;
}

/** `open` as an envelope (never rejects): {ok, value: Database, error: JSON text} (for Python). */
export function openEnvelope(name, durability) {
  return opened(open(name, durability));
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
