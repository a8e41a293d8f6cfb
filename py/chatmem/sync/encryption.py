"""End-to-end encryption of synced records: keys, the key check value and the
ciphertext format, identical on CPython and in the page.

Nothing here talks to a server or a store. The AES-GCM and PBKDF2 work is
done by an injected ``CipherSuite`` (``cryptography`` on CPython, WebCrypto
in the page); HMAC-SHA256, padding, encodings and the record layout are
plain Python, so both runtimes produce byte-identical formats.

Format, version 1 (docs/reference/protocol.md says the same):

- master key ``K`` (32 bytes): PBKDF2-HMAC-SHA256 over the UTF-8 of the
  NFC-normalised passphrase, the space's 16-byte ``salt`` and ``iterations``
  (default 600,000); or 32 raw bytes (``EncryptionKey``).
- ``enc_key = HMAC-SHA256(K, "chatmem-e2e-v1 enc")`` (the AES-256-GCM key);
  ``check = HMAC-SHA256(K, "chatmem-e2e-v1 check")`` (the key check value the
  server keeps); ``key_id`` = lowercase hex of ``check[:8]``.
- envelope: ``{"e2e": 1, "k": key_id, "op": op_id, "hlc": hlc, "iv": b64(12
  bytes), "ct": b64(ciphertext || 16-byte tag)}`` (standard base64, padded).
- associated data: ``b"chatmem-e2e-v1"`` followed by, for each of ``key_id,
  op_id, resource, id, hlc, field``, a 4-byte big-endian length and the UTF-8
  bytes.
- plaintext: the UTF-8 JSON of the value, right-padded with spaces (0x20) to a
  multiple of 32 bytes, so lengths leak only in 32-byte steps.
- a session's data: ``sessionId`` stays plain, every other field's value is
  its own envelope (``field`` = the field name), so the server can still merge
  per field by HLC. A message's data: ``{"sessionId": <plain>, "e2e":
  envelope}`` where the envelope holds the whole record (``field`` = ``"e2e"``);
  a fact's data: ``{"e2e": envelope}``, nothing plain (who it is about is
  content too).
  Deletes carry no content and are not encrypted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import struct
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import DecryptionError, ValidationError, WrongPassphrase, shown

__all__ = [
    "FORMAT",
    "DEFAULT_ITERATIONS",
    "MIN_ITERATIONS",
    "CipherSuite",
    "Passphrase",
    "EncryptionKey",
    "KeyParams",
    "SpaceKey",
    "new_params",
    "derive_key",
    "is_envelope",
    "envelope_problem",
    "envelope_key_ids",
    "encrypt_records",
    "decrypt_records",
    "decrypt_each",
    "is_encrypted_data",
    "associated_data",
    "b64e",
    "b64d",
]

FORMAT = 1
_LABEL = b"chatmem-e2e-v1"
DEFAULT_ITERATIONS = 600_000
#: the fewest PBKDF2 iterations a device accepts from a server's key params
MIN_ITERATIONS = 10_000
_MAX_ITERATIONS = 100_000_000
_PAD = 32
#: bytes of AES-GCM's tag at the end of every ciphertext
_TAG = 16
#: a message's (or a fact's) whole record travels in this one field
MESSAGE_FIELD = "e2e"
#: resources whose whole record is one envelope (a session's fields are encrypted one by one)
WHOLE_RECORD = frozenset({"message", "fact"})
#: fields that stay plain: the record's own routing ids
PLAIN_FIELDS = frozenset({"sessionId", "id"})


def b64e(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64d(text: Any, what: str = "value") -> bytes:
    if not isinstance(text, str):
        raise ValidationError(f"{what} must be a base64 string", field=what)
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as e:
        raise ValidationError(f"{what} is not valid base64", field=what) from e


class CipherSuite(Protocol):
    """The two primitives each runtime supplies (batched: one call per push or pulled page)."""

    async def pbkdf2_sha256(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        """32 bytes of PBKDF2-HMAC-SHA256."""
        ...

    async def seal_many(self, key: bytes, items: Sequence[tuple[bytes, bytes, bytes]]) -> list[bytes]:
        """AES-256-GCM encrypt each ``(iv, plaintext, ad)``: ``ciphertext || tag``."""
        ...

    async def open_many(self, key: bytes, items: Sequence[tuple[bytes, bytes, bytes]]) -> list[bytes | None]:
        """AES-256-GCM decrypt each ``(iv, ciphertext || tag, ad)``; None where it does not authenticate."""
        ...


class Passphrase:
    """A passphrase for end-to-end encrypted sync: ``SyncConfig(encryption=Passphrase("…"))``.

    The passphrase is held only in memory: never in ``repr``, a config dict, an
    export or the store. ``remember=True`` keeps the *derived* key (not the
    passphrase) in the store's ``kv`` so this device syncs after a reload
    without asking again. ``iterations`` applies when this device sets up a
    new space (the space's stored parameters win afterwards).
    """

    kind = "passphrase"

    def __init__(self, passphrase: str, *, remember: bool = False, iterations: int = DEFAULT_ITERATIONS):
        if not isinstance(passphrase, str) or not passphrase:
            raise ValidationError("the passphrase must be a non-empty string", field="encryption")
        if not isinstance(remember, bool):
            raise ValidationError("remember must be a bool", field="encryption")
        _check_iterations(iterations)
        self._secret: str | None = passphrase
        self.remember = remember
        self.iterations = iterations

    @classmethod
    def locked(cls, *, remember: bool = False) -> Passphrase:
        """Encryption is on but no passphrase was entered on this device (after a reload)."""
        p = cls("-", remember=remember)
        p._secret = None
        return p

    @property
    def is_locked(self) -> bool:
        return self._secret is None

    def secret_bytes(self) -> bytes:
        if self._secret is None:
            raise WrongPassphrase("sync is end-to-end encrypted: enter the passphrase on this device")
        return unicodedata.normalize("NFC", self._secret).encode("utf-8")

    def __repr__(self) -> str:
        return f"Passphrase(***, remember={self.remember})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Passphrase)
            and hmac.compare_digest((self._secret or "").encode(), (other._secret or "").encode())
            and self.remember == other.remember
        )

    __hash__ = None  # type: ignore[assignment]


class EncryptionKey:
    """A raw 32-byte key for end-to-end encrypted sync (no KDF): ``EncryptionKey(bytes)``."""

    kind = "key"

    def __init__(self, key: bytes, *, remember: bool = False):
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise ValidationError("an encryption key must be exactly 32 bytes", field="encryption")
        self.key = bytes(key)
        self.remember = bool(remember)
        self.is_locked = False

    def __repr__(self) -> str:
        return f"EncryptionKey(***, remember={self.remember})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EncryptionKey) and hmac.compare_digest(self.key, other.key)

    __hash__ = None  # type: ignore[assignment]


def _check_iterations(n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not MIN_ITERATIONS <= n <= _MAX_ITERATIONS:
        raise ValidationError(
            f"iterations must be an int in {MIN_ITERATIONS}..{_MAX_ITERATIONS}", field="iterations"
        )


@dataclass(frozen=True)
class KeyParams:
    """A space's public key parameters, as the server keeps them (no secret in here)."""

    kdf: str
    salt: str
    iterations: int
    key_id: str
    check: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": FORMAT,
            "kdf": self.kdf,
            "salt": self.salt,
            "iterations": self.iterations,
            "key_id": self.key_id,
            "check": self.check,
        }

    @classmethod
    def from_dict(cls, d: Any) -> KeyParams:
        """Parse and check; ``ValidationError(field=...)`` if malformed."""
        if not isinstance(d, Mapping):
            raise ValidationError("key params must be an object", field="params")
        if d.get("v", FORMAT) != FORMAT:
            raise ValidationError(f"unsupported encryption format {shown(d.get('v'))}", field="v")
        kdf = d.get("kdf")
        if kdf not in ("pbkdf2-sha256", "raw"):
            raise ValidationError(f"unknown kdf {shown(kdf)}", field="kdf")
        salt, check, key_id = d.get("salt"), d.get("check"), d.get("key_id")
        iterations = d.get("iterations", 0)
        if kdf == "pbkdf2-sha256":
            _check_iterations(iterations)
            if len(b64d(salt, "salt")) < 16:
                raise ValidationError("salt must be at least 16 bytes", field="salt")
        if len(b64d(check, "check")) != 32:
            raise ValidationError("check must be 32 bytes", field="check")
        if key_id != b64d(check, "check")[:8].hex():
            raise ValidationError("key_id must be the hex of the check value's first 8 bytes", field="key_id")
        return cls(str(kdf), str(salt or ""), int(iterations), str(key_id), str(check))


@dataclass(frozen=True)
class SpaceKey:
    """A verified key for one space: what the synchronizer encrypts with (never in ``repr``)."""

    key_id: str
    master: bytes = field(repr=False)
    enc: bytes = field(repr=False)


def _subkeys(master: bytes) -> tuple[bytes, bytes]:
    enc = hmac.new(master, _LABEL + b" enc", hashlib.sha256).digest()
    check = hmac.new(master, _LABEL + b" check", hashlib.sha256).digest()
    return enc, check


def space_key(master: bytes) -> tuple[SpaceKey, str]:
    """The key and its check value (base64) for a 32-byte master key."""
    enc, check = _subkeys(master)
    return SpaceKey(check[:8].hex(), master, enc), b64e(check)


async def _master(secret: Passphrase | EncryptionKey, params: KeyParams, suite: CipherSuite) -> bytes:
    if isinstance(secret, EncryptionKey):
        if params.kdf != "raw":
            raise WrongPassphrase("this space is encrypted with a passphrase, not a raw key")
        return secret.key
    if params.kdf != "pbkdf2-sha256":
        raise WrongPassphrase("this space is encrypted with a raw key, not a passphrase")
    return await suite.pbkdf2_sha256(secret.secret_bytes(), b64d(params.salt, "salt"), params.iterations)


async def derive_key(secret: Passphrase | EncryptionKey, params: KeyParams, suite: CipherSuite) -> SpaceKey:
    """The key for ``params`` if ``secret`` matches its check value, else ``WrongPassphrase``."""
    key, check = space_key(await _master(secret, params, suite))
    if not hmac.compare_digest(check, params.check):
        raise WrongPassphrase("the passphrase does not match this sync space (its key check value differs)")
    return key


async def new_params(secret: Passphrase | EncryptionKey, suite: CipherSuite) -> tuple[KeyParams, SpaceKey]:
    """Fresh parameters (a new random salt) for ``secret``, with the key they give."""
    if isinstance(secret, EncryptionKey):
        key, check = space_key(secret.key)
        return KeyParams("raw", "", 0, key.key_id, check), key
    salt = b64e(os.urandom(16))
    draft = KeyParams("pbkdf2-sha256", salt, secret.iterations, "", "")
    key, check = space_key(await _master(secret, draft, suite))
    return KeyParams("pbkdf2-sha256", salt, secret.iterations, key.key_id, check), key


def associated_data(key_id: str, op_id: str, resource: str, rid: str, hlc: str, fname: str) -> bytes:
    """The bytes bound to a ciphertext (see the module docstring)."""
    out = bytearray(_LABEL)
    for part in (key_id, op_id, resource, rid, hlc, fname):
        b = part.encode("utf-8")
        out += struct.pack(">I", len(b)) + b
    return bytes(out)


def _pad(value: Any) -> bytes:
    raw = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return raw + b" " * (-len(raw) % _PAD)


def is_envelope(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("e2e") == FORMAT and "ct" in value


_ENVELOPE_KEYS = frozenset({"e2e", "k", "op", "hlc", "iv", "ct"})
_KEY_ID = re.compile(r"[0-9a-f]{16}\Z")


def envelope_problem(value: Any, op_id: str | None, hlc: str | None) -> str | None:
    """Why ``value`` is not a well-formed envelope of the operation ``op_id`` at ``hlc``
    (None when it is): exactly the fields of the format, a key id of 16 hex digits, bound
    to that operation (``op_id`` None: to any), a 12-byte IV and a ciphertext as long as a
    padded plaintext and its tag. What the server can check without the key; the
    receiving device checks that it authenticates."""
    if not is_envelope(value):
        return "is not an envelope"
    if set(value) != _ENVELOPE_KEYS:
        return "holds other fields than e2e, k, op, hlc, iv and ct"
    key_id = value["k"]
    if not isinstance(key_id, str) or not _KEY_ID.match(key_id):
        return "names no key id (16 hex digits)"
    if not isinstance(value["op"], str) or not isinstance(value["hlc"], str):
        return "is bound to no operation"
    if op_id is not None and (value["op"] != op_id or value["hlc"] != hlc):
        return "is bound to another operation"
    try:
        iv, ct = b64d(value["iv"], "iv"), b64d(value["ct"], "ct")
    except ValidationError as e:
        return str(e)
    if len(iv) != 12:
        return "has an IV that is not 12 bytes"
    if len(ct) < _PAD + _TAG or (len(ct) - _TAG) % _PAD:
        return "has a ciphertext whose length is not that of a padded plaintext and its tag"
    return None


def is_encrypted_data(resource: str, data: Mapping[str, Any] | None) -> bool:
    """True if ``data`` holds content only in envelopes (a delete's routing-only data counts)."""
    if data is None:
        return True
    return all(k in PLAIN_FIELDS or is_envelope(v) for k, v in data.items())


def envelope_key_ids(data: Mapping[str, Any] | None) -> set[str | None]:
    """The key ids of a record's envelopes; ``None`` stands for a plain content field."""
    if data is None:
        return set()
    return {(str(v.get("k")) if is_envelope(v) else None) for k, v in data.items() if k not in PLAIN_FIELDS}


@dataclass
class _Item:
    """One field to encrypt or decrypt, with where its result goes."""

    index: int
    fname: str
    iv: bytes
    body: bytes
    ad: bytes
    op_id: str = ""
    hlc: str = ""


async def encrypt_records(
    records: Sequence[Mapping[str, Any]], key: SpaceKey, suite: CipherSuite
) -> list[dict[str, Any] | None]:
    """Encrypt the ``data`` of each ``{"op_id", "resource", "id", "hlc", "data"}``.

    Returns the new ``data`` per record (``None`` / routing-only data pass
    through). An already-encrypted field is kept as is.
    """
    out: list[dict[str, Any] | None] = []
    items: list[_Item] = []
    for i, rec in enumerate(records):
        data = rec.get("data")
        if data is None:
            out.append(None)
            continue
        resource, rid, op_id, hlc = str(rec["resource"]), str(rec["id"]), str(rec["op_id"]), str(rec["hlc"])
        if resource in WHOLE_RECORD:
            plain = {k: v for k, v in data.items() if k in PLAIN_FIELDS and k != "id"}
            fields = {MESSAGE_FIELD: dict(data)} if not set(data) <= PLAIN_FIELDS else {}
        else:
            plain = {k: v for k, v in data.items() if k in PLAIN_FIELDS or is_envelope(v)}
            fields = {k: v for k, v in data.items() if k not in plain}
        out.append(plain)
        for fname, value in fields.items():
            ad = associated_data(key.key_id, op_id, resource, rid, hlc, fname)
            items.append(_Item(i, fname, os.urandom(12), _pad(value), ad, op_id, hlc))
    sealed = await suite.seal_many(key.enc, [(it.iv, it.body, it.ad) for it in items]) if items else []
    for it, ct in zip(items, sealed):
        target = out[it.index]
        assert target is not None
        target[it.fname] = {
            "e2e": FORMAT,
            "k": key.key_id,
            "op": it.op_id,
            "hlc": it.hlc,
            "iv": b64e(it.iv),
            "ct": b64e(ct),
        }
    return out


def _envelope_item(index: int, fname: str, env: Any, resource: str, rid: str) -> _Item:
    if not is_envelope(env):
        raise DecryptionError(f"{resource} {shown(rid)}: field {shown(fname)} is not an envelope")
    op_id, hlc, key_id = env.get("op"), env.get("hlc"), env.get("k")
    if not all(isinstance(x, str) for x in (op_id, hlc, key_id)):
        raise DecryptionError(f"{resource} {shown(rid)}: field {shown(fname)} has a malformed envelope")
    try:
        iv, ct = b64d(env.get("iv"), "iv"), b64d(env.get("ct"), "ct")
    except ValidationError as e:
        raise DecryptionError(f"{resource} {shown(rid)}: field {shown(fname)}: {e}") from e
    if len(iv) != 12 or len(ct) < 16:
        raise DecryptionError(f"{resource} {shown(rid)}: field {shown(fname)} has a malformed envelope")
    return _Item(index, fname, iv, ct, associated_data(key_id, op_id, resource, rid, hlc, fname), op_id, hlc)


async def decrypt_records(
    records: Sequence[Mapping[str, Any]],
    keys: Mapping[str, SpaceKey],
    suite: CipherSuite,
    *,
    allow_plain: bool = False,
) -> list[dict[str, Any] | None]:
    """Decrypt the ``data`` of each ``{"resource", "id", "data"}`` with the key its envelopes name.

    ``WrongPassphrase`` if an envelope names a key not in ``keys`` (the passphrase
    was changed elsewhere); ``DecryptionError`` if one does not authenticate or
    does not belong to its record; plain content is refused unless ``allow_plain``.
    The first record that fails raises (``decrypt_each`` answers each record apart).
    """
    out: list[dict[str, Any] | None] = []
    for opened in await decrypt_each(records, keys, suite, allow_plain=allow_plain):
        if isinstance(opened, Exception):
            raise opened
        out.append(opened)
    return out


async def decrypt_each(
    records: Sequence[Mapping[str, Any]],
    keys: Mapping[str, SpaceKey],
    suite: CipherSuite,
    *,
    allow_plain: bool = False,
) -> list[dict[str, Any] | None | WrongPassphrase | DecryptionError]:
    """``decrypt_records``, record by record: each record's plain ``data`` (None for a
    delete), or the error that record alone raised, so that one record no key opens
    never keeps the others of its page from being applied."""
    out: list[dict[str, Any] | None | WrongPassphrase | DecryptionError] = []
    work: dict[str, list[_Item]] = {}
    for i, rec in enumerate(records):
        data, resource, rid = rec.get("data"), str(rec["resource"]), str(rec["id"])
        if data is None:
            out.append(None)
            continue
        plain: dict[str, Any] = {}
        items: list[tuple[str, _Item]] = []
        try:
            if not isinstance(data, Mapping):
                raise DecryptionError(f"{resource} {shown(rid)}: its data is not an object")
            for fname, value in data.items():
                if fname in PLAIN_FIELDS or (allow_plain and not is_envelope(value)):
                    plain[fname] = value
                    continue
                it = _envelope_item(i, fname, value, resource, rid)
                kid = str(value["k"])
                if kid not in keys:
                    raise WrongPassphrase(
                        f"{resource} {shown(rid)} is encrypted with another key: the passphrase was changed "
                        "on another device; enter the new one"
                    )
                items.append((kid, it))
        except (WrongPassphrase, DecryptionError) as e:
            out.append(e)
            continue
        for kid, it in items:
            work.setdefault(kid, []).append(it)
        out.append(plain)
    for kid, items_ in work.items():
        opened = await suite.open_many(keys[kid].enc, [(it.iv, it.body, it.ad) for it in items_])
        for it, pt in zip(items_, opened):
            rec, target = records[it.index], out[it.index]
            if not isinstance(target, dict):
                continue  # another field of this record failed already
            where = f"{rec['resource']} {shown(rec['id'])} field {shown(it.fname)}"
            try:
                if pt is None:
                    raise DecryptionError(
                        f"{where} failed authentication (tampered, or moved to another record)"
                    )
                try:
                    value = json.loads(pt.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError) as e:
                    raise DecryptionError(f"{where} decrypted to something that is not JSON") from e
                _merge(target, it, value, rec)
            except DecryptionError as e:
                out[it.index] = e
    return out


def _merge(target: dict[str, Any], it: _Item, value: Any, rec: Mapping[str, Any]) -> None:
    if rec["resource"] in WHOLE_RECORD and it.fname == MESSAGE_FIELD:
        what = f"{rec['resource']} {shown(rec['id'])}"
        if not isinstance(value, dict):
            raise DecryptionError(f"{what} decrypted to a non-object")
        for k in PLAIN_FIELDS:
            if k in target and k in value and target[k] != value[k]:
                raise DecryptionError(f"{what}: plain {k} differs from the encrypted one")
        target.update(value)
    else:
        target[it.fname] = value
