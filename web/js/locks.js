// What the sync engine needs of the browser: a Web Lock so that one tab
// drains the outbox, and the online status with its event.

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
