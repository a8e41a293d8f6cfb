// One query index per database for every tab of the origin.
//
// The tab that holds the Web Lock `chatmem-index:<path>` owns the index (its
// DuckDB-Wasm engine and OPFS file) and answers the other tabs' requests, which
// travel over the BroadcastChannel of the same name:
//   {t: "req", id, from, body}   a request (body: JSON text), to whoever owns the index
//   {t: "res", id, to, body}     its answer (body: JSON text), to the tab that asked
//   {t: "owner", from}           a new owner serves: requests not answered yet are sent again
// Every other tab waits in line for the lock; when the owner goes (closed,
// reloaded, crashed) the browser hands the lock to the next tab, which opens
// the saved file and then announces itself. A request is never lost: the
// asking tab keeps it until it is answered and sends it again to each new owner;
// an owner runs an id once. The bodies are opaque here (the page runtime's
// Python gives them meaning).

const SEEN_MAX = 5000;
const CANCELLED = JSON.stringify({ ok: false, error: { type: "QueryError", message: "Interrupted: the query was cancelled" } });
const CLOSED = JSON.stringify({ ok: false, error: { type: "DatabaseClosed", message: "the query index is closed" } });

export class IndexShare {
  constructor(name) {
    this.name = `chatmem-index:${name}`;
    this.tab = globalThis.crypto?.randomUUID?.() || `${Date.now()}-${Math.random()}`;
    this.role = "none"; // none | solo | owner | guest | closing | closed
    this.handler = null; // the owner's: (id, body) => void; it answers through answer(id, body)
    this.queue = []; // requests taken before serve()
    this.pending = new Map(); // this tab's requests not answered yet: id -> {body, resolve}
    this.asked = new Map(); // requests this owner took and has not answered: id -> asking tab
    this.seen = new Set(); // ids this owner took (a request sent again is not run twice)
    this.channel = null;
    this.releaseLock = null;
    this.lockDone = null;
    this.abort = null;
  }

  /** "owner" (this tab holds the lock now), "guest" (another tab does; this one waits
   *  in line and calls `onOwner()` when its turn comes) or "solo" (no Web Locks or
   *  BroadcastChannel: every tab keeps its own index). */
  async claim(onOwner) {
    if (!globalThis.navigator?.locks || typeof BroadcastChannel !== "function") {
      this.role = "solo";
      return "solo";
    }
    this.channel = new BroadcastChannel(this.name);
    this.channel.onmessage = (ev) => this._message(ev.data);
    const got = await new Promise((resolve, reject) => {
      const done = navigator.locks.request(this.name, { ifAvailable: true }, (lock) => {
        if (!lock) {
          resolve(false);
          return undefined;
        }
        resolve(true);
        return this._own();
      });
      done.catch(reject);
      this.lockDone = done;
    });
    if (got) return "owner";
    this.role = "guest";
    this.abort = new AbortController();
    this.lockDone = navigator.locks.request(this.name, { signal: this.abort.signal }, (_lock) => {
      if (this.role !== "guest") return undefined; // closed while waiting
      const held = this._own();
      try { onOwner(); } catch (e) { console.error(e); }
      return held;
    }).catch(() => { /* aborted: this tab closed its index */ });
    return "guest";
  }

  _own() {
    this.role = "owner";
    return new Promise((release) => (this.releaseLock = release));
  }

  _post(msg) {
    if (this.channel) this.channel.postMessage(msg);
  }

  _message(m) {
    if (!m || typeof m !== "object") return;
    if (m.t === "req") {
      if (this.role === "owner" && !this.seen.has(m.id)) this._take(m.id, m.body, m.from);
    } else if (m.t === "res") {
      if (m.to === this.tab) this._settle(m.id, m.body);
    } else if (m.t === "owner" && this.role === "guest") {
      for (const [id, p] of this.pending) this._post({ t: "req", id, from: this.tab, body: p.body });
    }
  }

  _take(id, body, from) {
    this.seen.add(id);
    if (this.seen.size > SEEN_MAX) this.seen.delete(this.seen.values().next().value);
    this.asked.set(id, from);
    if (this.handler) this._run(id, body);
    else this.queue.push([id, body]);
  }

  _run(id, body) {
    try {
      this.handler(id, body);
    } catch (e) {
      this.answer(id, JSON.stringify({ ok: false, error: { type: "QueryError", message: String(e?.message || e) } }));
    }
  }

  _settle(id, body) {
    const p = this.pending.get(id);
    if (p) {
      this.pending.delete(id);
      p.resolve(body);
    }
  }

  /** Send a request to the owner (this tab included); resolves to its answer (JSON text). */
  request(id, body) {
    return new Promise((resolve) => {
      if (this.role === "closing" || this.role === "closed" || this.role === "none" || this.role === "solo") {
        resolve(CLOSED);
        return;
      }
      this.pending.set(id, { body, resolve });
      if (this.role === "owner") {
        if (!this.seen.has(id)) this._take(id, body, this.tab);
      } else this._post({ t: "req", id, from: this.tab, body });
    });
  }

  /** Stop waiting for the answer to `id` (a cancelled request): it answers at once. */
  forget(id) {
    this._settle(id, CANCELLED);
  }

  /** The owner's answer to request `id`, delivered to the tab that asked. */
  answer(id, body) {
    const from = this.asked.get(id);
    if (from === undefined) return;
    this.asked.delete(id);
    if (from === this.tab) this._settle(id, body);
    else this._post({ t: "res", id, to: from, body });
  }

  /** The owner is ready: answer what waited, this tab's own requests to a former owner too,
   *  and tell the other tabs to send again what is still unanswered. */
  serve(handler) {
    if (this.role !== "owner") return;
    this.handler = handler;
    const queued = this.queue;
    this.queue = [];
    for (const [id, body] of queued) this._run(id, body);
    for (const [id, p] of this.pending) if (!this.seen.has(id)) this._take(id, p.body, this.tab);
    this._post({ t: "owner", from: this.tab });
  }

  /** Take no more requests (those taken are still answered); the tabs ask the next owner. */
  stop() {
    if (this.role === "owner" || this.role === "guest") this.role = "closing";
    for (const p of this.pending.values()) p.resolve(CLOSED);
    this.pending.clear();
  }

  /** Leave: stop waiting in line, or release the lock (resolves once it is free). */
  async close() {
    this.stop();
    this.role = "closed";
    this.handler = null;
    this.queue = [];
    if (this.abort) this.abort.abort();
    if (this.channel) this.channel.close();
    this.channel = null;
    const release = this.releaseLock;
    this.releaseLock = null;
    if (release) {
      release();
      await this.lockDone;
    }
    return null;
  }

  /** For status displays and tests. */
  info() {
    return JSON.stringify({ role: this.role, tab: this.tab, waiting: this.pending.size, serving: this.asked.size });
  }
}

/** The sharing point of the query index of `name` (the OPFS path of its cache file). */
export function indexShare(name) {
  return new IndexShare(name);
}
