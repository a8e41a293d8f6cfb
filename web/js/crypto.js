// End-to-end encryption primitives for sync, on WebCrypto: PBKDF2-SHA256 and
// AES-256-GCM. Python (chatmem.sync.encryption) builds the format; this module only
// runs the two primitives, a whole batch per call. Bytes cross as base64 in
// JSON text; a ciphertext that does not authenticate comes back as null.

const subtle = () => {
  if (!globalThis.crypto?.subtle) throw new Error("WebCrypto is not available (needs a secure context)");
  return globalThis.crypto.subtle;
};

function fromB64(text) {
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function toB64(bytes) {
  const view = new Uint8Array(bytes);
  let bin = "";
  for (let i = 0; i < view.length; i += 0x8000) {
    bin += String.fromCharCode.apply(null, view.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

// PBKDF2-HMAC-SHA256, 32 bytes: arguments and answer are base64.
export async function e2ePbkdf2(passwordB64, saltB64, iterations) {
  const base = await subtle().importKey("raw", fromB64(passwordB64), "PBKDF2", false, ["deriveBits"]);
  const bits = await subtle().deriveBits(
    { name: "PBKDF2", hash: "SHA-256", salt: fromB64(saltB64), iterations }, base, 256);
  return toB64(bits);
}

async function aesKey(keyB64, usage) {
  return subtle().importKey("raw", fromB64(keyB64), { name: "AES-GCM" }, false, [usage]);
}

// AES-256-GCM encrypt: items is JSON [[iv, plaintext, ad], ...] (base64); answers JSON [ct, ...].
export async function e2eSeal(keyB64, itemsJson) {
  const key = await aesKey(keyB64, "encrypt");
  const out = await Promise.all(JSON.parse(itemsJson).map(async ([iv, pt, ad]) => toB64(
    await subtle().encrypt({ name: "AES-GCM", iv: fromB64(iv), additionalData: fromB64(ad) }, key, fromB64(pt)))));
  return JSON.stringify(out);
}

// AES-256-GCM decrypt: items is JSON [[iv, ct, ad], ...]; answers JSON [pt | null, ...].
export async function e2eOpen(keyB64, itemsJson) {
  const key = await aesKey(keyB64, "decrypt");
  const out = await Promise.all(JSON.parse(itemsJson).map(async ([iv, ct, ad]) => {
    try {
      return toB64(await subtle().decrypt(
        { name: "AES-GCM", iv: fromB64(iv), additionalData: fromB64(ad) }, key, fromB64(ct)));
    } catch (e) {
      if (e?.name === "OperationError") return null; // did not authenticate
      throw e;
    }
  }));
  return JSON.stringify(out);
}
