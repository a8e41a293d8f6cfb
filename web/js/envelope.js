// The one envelope of the bridge: how every answer crosses to Python.
//
// A handle's `call(method, argsJson)` answers JSON text, either
// {"ok": true, "value": ...} or {"ok": false, "error": {"name", "message"}},
// with the real DOMException name (or one of ours, `BridgeError`), which
// Python's page runtime maps to a typed error. It never rejects. Opening a
// handle answers {ok, value, error} the same way, with the handle as `value`.

/** An error of our own making, named for Python's error translation. */
export class BridgeError extends Error {
  constructor(name, message) {
    super(message);
    this.name = name;
  }
}

/** {name, message} of any thrown value. */
export function errorOf(e) {
  return { name: e?.name || "Error", message: e?.message || String(e) };
}

/** Run `fn(args)` on the parsed `argsJson` and answer the envelope as JSON text. */
export async function reply(fn, argsJson) {
  try {
    const value = await fn(argsJson ? JSON.parse(argsJson) : {});
    return JSON.stringify({ ok: true, value });
  } catch (e) {
    return JSON.stringify({ ok: false, error: errorOf(e) });
  }
}

/** A handle's `call`: `target[method](args, extra)` if `allowed` names it (and `check()` passes), as an envelope. */
export function callMethod(target, allowed, method, argsJson, check = () => {}, extra = undefined) {
  return reply((args) => {
    check();
    if (!allowed.has(method)) throw new BridgeError("NotSupportedError", `unknown bridge method ${method}`);
    return target[method](args, extra);
  }, argsJson);
}

/** Await `opening` and answer {ok, value: handle, error: null} or {ok: false, value: null, error: JSON text}. */
export async function opened(opening) {
  try {
    return { ok: true, value: await opening, error: null };
  } catch (e) {
    return { ok: false, value: null, error: JSON.stringify(errorOf(e)) };
  }
}
