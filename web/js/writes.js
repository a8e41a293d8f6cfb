// The pieces of chatmem's write transactions (database.js runs them): outbox
// operations enqueued in the same transaction, failures turned into our error
// names, and the append, which assigns `seq` inside its transaction (a batch
// may be fed to its transaction in chunks: `BatchAppend`; an import too: `BatchImport`).

import { unwrap } from "idb";

import { BridgeError, reply } from "./envelope.js";
import { OUTBOX_KEY } from "./schema.js";

/** The stores of every message write's transaction. */
const WRITE_STORES = ["sessions", "messages", "outbox", "kv"];

// how many session records a tab keeps to append without waiting for a read
const KNOWN_SESSIONS = 64;

// Outbox operations enqueued in the same transaction as the change they describe,
// once sync was turned on: the kv key OUTBOX_KEY is read
// in that transaction (the scope must hold "kv"). A message create op keeps data
// null: it refers to the stored message, which the push reads. `ops` is a list, or
// a function answering the list as JSON text, called (synchronously, inside the
// transaction) only if the outbox is on: a big write skips building ops nobody keeps.
// The look and the adds are bare requests (no promise each, as a batch's message adds):
// a failed add aborts the transaction, whose `done` the caller awaits (`firstError`
// keeps the add's own error where the caller asks for it); the one promise answered
// rejects if building the ops threw, after aborting the transaction.
export function enqueue(db, tx, ops, created = true) {
  if (!ops || (Array.isArray(ops) && ops.length === 0)) return [];
  const outbox = unwrap(tx.objectStore("outbox"));
  const add = () => {
    const list = Array.isArray(ops) ? ops : JSON.parse(ops());
    for (const { only_if_created: onlyNew, ...op } of list) {
      if (created || !onlyNew) outbox.add(op);
    }
  };
  if (db.outboxOn) {  // turned on for good: no need to look again
    add();
    return [];
  }
  const look = unwrap(tx.objectStore("kv")).count(OUTBOX_KEY);
  return [new Promise((resolve, reject) => {
    look.onsuccess = () => {
      try {
        if (look.result) {
          db.outboxOn = true;
          add();
        }
        resolve();
      } catch (e) {
        try { tx.abort(); } catch { /* already finished */ }
        reject(e);
      }
    };
    look.onerror = () => resolve();  // the transaction fails with it: `done` says so
  })];
}

/** Whether two JSON-shaped records are equal (same keys, same values, any key order). */
function sameRecord(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) if (!Object.hasOwn(b, k) || !sameRecord(a[k], b[k])) return false;
  return true;
}

export function nextSeqAfter(messages) {
  let max = -1;
  for (const m of messages) if (m.seq > max) max = m.seq;
  return max + 1;
}

export async function settle(promises) {
  // Wait for every request and the transaction; the first failure wins.
  await Promise.all(promises);
}

/** The session is not there: abort the transaction (nothing written) and say so. */
export async function missing(tx, sessionId) {
  tx.abort();
  await tx.done.catch(() => {});
  throw new BridgeError("SessionNotFound", sessionId);
}

export function duplicateId(e) {
  // the only ConstraintError an add can raise here is a key that exists
  if (e?.name === "ConstraintError") throw new BridgeError("DuplicateId", e.message);
  throw e;
}

/** sessionId -> the session record as this tab last wrote or read it (a few, the most recent). */
export class KnownSessions extends Map {
  remember(rec) {
    this.delete(rec.sessionId);
    this.set(rec.sessionId, rec);
    if (this.size > KNOWN_SESSIONS) this.delete(this.keys().next().value);
  }
}

/** `Database.appendMessages`: seq is read and assigned inside one readwrite transaction
 *  (IndexedDB serialises overlapping ones, so two tabs never share a seq). */
export async function appendMessages(db, { sessionId, records, now, create, ops }) {
  const known = db.known.get(sessionId);
  if (known) {
    const done = await appendOver(db, known, sessionId, records, now, ops);
    if (done) return done;
  }
  const tx = db.tx(WRITE_STORES, "readwrite");
  const sessions = tx.objectStore("sessions");
  let sess = await sessions.get(sessionId);
  const created = !sess;
  if (!sess) {
    if (!create) {
      await missing(tx, sessionId);
    }
    sess = { ...create, nextSeq: 0, messageCount: 0 };
  }
  const failed = firstError(tx);
  const adds = addRequests(tx, sess, sessionId);
  adds.add(records);
  const ps = [putSession(tx, sess, adds, now), ...enqueue(db, tx, ops, created), tx.done];
  await settle(ps).catch((e) => duplicateId(failed.error ?? e));
  return appended(db, sessionId, adds.first, sess);
}

/** An append that trusts `known` (the session record this tab last wrote or read)
 *  instead of waiting for the read: the read is still the transaction's first
 *  request, so it sees the record as stored before these writes; if it differs
 *  from `known` (another tab or a pull changed it) the transaction is aborted
 *  before it can commit, nothing is written, and the caller reads and retries.
 *  One round trip fewer. Resolves to null when it had to abort. */
async function appendOver(db, known, sessionId, records, now, ops) {
  const over = new Over(db, known, sessionId);
  over.adds.add(records);
  return await over.commit(now, ops);
}

/** The open transaction of an append over a known session record (see `appendOver`). */
class Over {
  constructor(db, known, sessionId) {
    this.db = db;
    this.sessionId = sessionId;
    const tx = this.tx = db.tx(WRITE_STORES, "readwrite");
    this.stale = false;
    this.failed = firstError(tx);
    this.check = tx.objectStore("sessions").get(sessionId).then((stored) => {
      if (!sameRecord(stored, known)) {
        this.stale = true;
        tx.abort();
      }
    });
    this.sess = { ...known };
    this.adds = addRequests(tx, this.sess, sessionId);
  }

  /** Put the session, enqueue the ops, wait for the commit: the append's answer, or null if stale. */
  async commit(now, ops) {
    const { db, tx, sess, adds } = this;
    const ps = [this.check, putSession(tx, sess, adds, now), ...enqueue(db, tx, ops, false), tx.done];
    try {
      await settle(ps);
    } catch (e) {
      await tx.done.catch(() => {});
      if (this.stale) {
        db.known.delete(this.sessionId);
        return null;
      }
      duplicateId(this.failed.error ?? e);
    }
    return appended(db, this.sessionId, adds.first, sess);
  }
}

/** The first request error of `tx`. A message add is a bare request (no promise of its own,
 *  thousands in a batch): its error reaches the transaction, whose `done` then rejects with
 *  an AbortError; this keeps the add's own error (a ConstraintError: the id exists). */
export function firstError(tx) {
  const box = { error: null };
  // capturing: before `done`'s own listener rejects (and its rejection is handled)
  unwrap(tx).addEventListener("error", (ev) => { box.error ??= ev.target?.error ?? null; }, true);
  return box;
}

/** The message adds of an append over the session record `sess`, from its next seq on. */
function addRequests(tx, sess, sessionId) {
  const messages = unwrap(tx.objectStore("messages"));
  let seq = sess.nextSeq ?? sess.messageCount ?? 0;
  return {
    first: seq,
    count: 0,
    add(records) {  // the parsed records are this call's own: complete them in place
      for (const r of records) {
        r.sessionId = sessionId;
        r.seq = seq++;
        messages.add(r);
      }
      this.count += records.length;
    },
    get next() { return seq; },
  };
}

/** The session record after the adds (updated in place), put in the same transaction. */
function putSession(tx, sess, adds, now) {
  sess.nextSeq = adds.next;
  sess.messageCount = (sess.messageCount ?? 0) + adds.count;
  sess.updatedAt = now;
  return tx.objectStore("sessions").put(sess);
}

/** An imported session's adds in `tx`, as bare requests (their first error: `firstError`). */
export function addImported(db, tx, record, msgs) {
  db.known.delete(record.sessionId);
  unwrap(tx.objectStore("sessions")).add({ ...record, nextSeq: nextSeqAfter(msgs), messageCount: msgs.length });
  const messages = unwrap(tx.objectStore("messages"));
  for (const m of msgs) messages.add(m);
}

/** What `BatchAppend` and `BatchImport` share: Python feeds chunks (JSON text) and then calls
 *  `finish`, all in one task. A chunk that fails to parse or to issue its requests aborts the
 *  transaction (`openTx`) and is `finish`'s answer; a write left neither finished nor aborted
 *  when the task ends is aborted. */
class FedWrite {
  constructor() {
    this.error = null;
    this.done = false;
    this.openTx = null;
    queueMicrotask(() => { if (!this.done) this.abort(); });
  }

  /** Add one chunk. Never throws: a failure is `finish`'s answer. */
  feed(json) {
    if (this.error || this.done) return;
    try {
      this.take(JSON.parse(json));
    } catch (e) {
      this.error = e;
      this.abort();
    }
  }

  /** Nothing of this write is written. */
  abort() {
    this.done = true;
    try {
      this.openTx?.abort();
    } catch { /* already finished */ }
  }

  /** At `finish`: throw if a chunk failed or the write was aborted; from here on it is done. */
  begin() {
    if (this.error || this.done) {
      this.abort();
      throw this.error ?? new BridgeError("AbortError", "the batch was aborted");
    }
    this.done = true;
  }
}

/** A batch append fed in chunks (`Database.batchAppend`): over a session record this tab
 *  knows, the transaction opens at once and each chunk's adds are issued as the chunk
 *  arrives, so IndexedDB writes one chunk while the caller builds the next. The caller
 *  feeds every chunk and then calls `finish` in the same task, never awaiting in between
 *  (the transaction stays active): all of it commits, or none. A batch left neither
 *  finished nor aborted when the task ends is aborted. Without a known record (or when
 *  the known one turns out stale) the records are written at `finish` as `appendMessages`
 *  writes them, over a read of the session. */
export class BatchAppend extends FedWrite {
  constructor(db, sessionId) {
    super();
    this.db = db;
    this.sessionId = sessionId;
    this.records = [];
    const known = db.known.get(sessionId);
    try {
      this.over = known ? new Over(db, known, sessionId) : null;
    } catch (e) {  // closed
      this.over = null;
      this.error = e;
    }
    this.openTx = this.over?.tx ?? null;
    this.openTx?.done.catch(() => {});  // awaited by `finish`; an abort is answered there
  }

  /** One chunk: a list of message records. */
  take(chunk) {
    for (const r of chunk) this.records.push(r);
    this.over?.adds.add(chunk);
  }

  /** Commit (`ops` as for `appendMessages`); resolves to [first seq, session record]. */
  async finish(now, ops) {
    this.begin();
    if (this.over) {
      const answer = await this.over.commit(now, ops);
      if (answer) return answer;
    }
    return await appendMessages(this.db, { sessionId: this.sessionId, records: this.records, now, create: null, ops });
  }

  /** `finish` for Python: JSON arguments {now, ops} in, the envelope out (never rejects). */
  finishEnvelope(argsJson, opsLater) {
    return reply(({ now, ops }) => this.finish(now, ops ?? opsLater), argsJson);
  }
}

/** An import fed in chunks (`Database.batchImport`): its one readwrite transaction opens at
 *  once (strict durability: a large, deliberate write) and each chunk's session and message
 *  adds are issued as the chunk arrives, so IndexedDB writes one chunk while the caller checks
 *  the next. All of it commits, or none (a failed add, e.g. an id already stored, aborts the
 *  transaction; so does `abort`, and a failed or unfinished feed). */
export class BatchImport extends FedWrite {
  constructor(db) {
    super();
    this.db = db;
    this.sessionIds = [];
    try {
      this.openTx = db.tx(WRITE_STORES, "readwrite", "strict");
      this.failed = firstError(this.openTx);
      this.openTx.done.catch(() => {});  // awaited by `finish`; an abort is answered there
    } catch (e) {  // closed
      this.error = e;
    }
  }

  /** One chunk: [session record, message records] pairs. */
  take(chunk) {
    for (const [record, msgs] of chunk) {
      addImported(this.db, this.openTx, record, msgs);
      this.sessionIds.push(record.sessionId);
    }
  }

  /** Commit, with the import's outbox `ops` (as `enqueue` takes them); resolves to null. */
  async finish(ops) {
    this.begin();
    try {
      await settle([...enqueue(this.db, this.openTx, ops), this.openTx.done]);
    } catch (e) {
      this.abort();
      duplicateId(this.failed.error ?? e);
    }
    this.db.notify("session", this.sessionIds);
    return null;
  }

  /** `finish` for Python: JSON arguments {ops} in, the envelope out (never rejects). */
  finishEnvelope(argsJson, opsLater) {
    return reply(({ ops }) => this.finish(ops ?? opsLater), argsJson);
  }
}

function appended(db, sessionId, first, sess) {
  db.known.remember(sess);
  db.notify("messages", [sessionId]);
  // the caller has the records: send back only what the transaction decided
  return [first, sess];
}
