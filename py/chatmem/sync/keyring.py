"""The device's end-to-end key for its sync space: verify it against the
server's key check value, set a plain space up, re-encrypt a space to a new
key, and encrypt / decrypt what the synchronizer pushes and pulls.

Durable state on the device: only with ``remember=True`` the derived master
key (never the passphrase) in ``kv`` under ``sync.e2e.key``; otherwise
nothing, and after a reload the device is ``locked`` until the passphrase is
entered again. On the server: the space's key parameters (``/v1/e2e``).

Re-encryption (turning encryption on, or a passphrase change) is resumable
and rewrites every record exactly once: the server remembers the pending key;
each record's envelopes say which key it is under; a record already under the
new key answers ``already``. Run it again with the same new passphrase after
an interruption and it goes on where it stopped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import SyncPermanentError, SyncTransientError, ValidationError, WrongPassphrase
from .encryption import (
    CipherSuite,
    EncryptionKey,
    KeyParams,
    Passphrase,
    SpaceKey,
    b64d,
    b64e,
    decrypt_each,
    decrypt_records,
    derive_key,
    encrypt_records,
    envelope_key_ids,
    new_params,
    space_key,
)
from .protocol import SyncClient
from .quarantine import Quarantined, quarantined

if TYPE_CHECKING:
    from ..stores.base import Store

__all__ = ["Keyring", "KEY_KV", "REWRITE_BATCH"]

log = logging.getLogger("chatmem.sync")

KEY_KV = "sync.e2e.key"
REWRITE_BATCH = 200
_MAX_ROUNDS = 20

Secret = Passphrase | EncryptionKey


def _params(value: Any) -> KeyParams | None:
    return KeyParams.from_dict(value) if value is not None else None


class Keyring:
    """One device's key for one space (``mem.sync`` holds one)."""

    def __init__(self, store: Store, suite_factory: Any, ids: Any):
        self._store = store
        self._suite_factory = suite_factory
        self._suite: CipherSuite | None = None
        self._ids = ids
        #: the verified key of the space's current key id (None: plain space or not yet checked)
        self.key: SpaceKey | None = None
        #: True once the server said the space is encrypted
        self.space_encrypted = False
        #: the key id of a (re-)encryption in progress, as last seen
        self.pending_key_id: str | None = None
        #: how many records this device rewrote to a new key (over its lifetime)
        self.rewritten = 0

    @property
    def suite(self) -> CipherSuite:
        if self._suite is None:
            self._suite = self._suite_factory()
        return self._suite

    async def _state(self, client: SyncClient) -> tuple[KeyParams | None, KeyParams | None]:
        st = await client.call("GET", "/v1/e2e")
        if not isinstance(st, dict):
            raise SyncTransientError("/v1/e2e: malformed answer", status=200)
        try:
            return _params(st.get("current")), _params(st.get("pending"))
        except ValidationError as e:
            raise SyncTransientError(f"/v1/e2e: malformed key params: {e}", status=200) from e

    async def remembered_key_id(self) -> str | None:
        """The id of the key this device remembers (``remember=True``), if any."""
        rec = await self._store.kv_get(KEY_KV)
        return rec["key_id"] if isinstance(rec, dict) and isinstance(rec.get("key_id"), str) else None

    async def _remembered(self) -> SpaceKey | None:
        rec = await self._store.kv_get(KEY_KV)
        if not isinstance(rec, dict) or not isinstance(rec.get("master"), str):
            return None
        return space_key(b64d(rec["master"], "master"))[0]

    async def _key_for(self, secret: Secret, params: KeyParams) -> SpaceKey:
        """The key for ``params``: cached, remembered, or derived (checked against the check value)."""
        if self.key is not None and self.key.key_id == params.key_id:
            return self.key
        if secret.is_locked:
            mem = await self._remembered()
            if mem is not None and mem.key_id == params.key_id:
                return mem
            raise WrongPassphrase(
                "sync is end-to-end encrypted: enter the passphrase on this device"
                if mem is None
                else "the passphrase was changed on another device: enter the new one"
            )
        return await derive_key(secret, params, self.suite)

    async def _keep(self, secret: Secret, key: SpaceKey) -> None:
        self.key = key
        if secret.remember:
            await self._store.kv_set(KEY_KV, {"key_id": key.key_id, "master": b64e(key.master)})

    async def forget(self) -> None:
        """Drop the remembered key from this device's store, and the one in memory."""
        self.key = None
        await self._store.kv_set(KEY_KV, None)

    async def verify(self, secret: Secret, client: SyncClient) -> bool:
        """Check ``secret`` against the space's key check value now (``WrongPassphrase``
        when it does not match) and keep its key. False, with nothing checked, when the
        space is still plain: the next sync encrypts it with ``secret`` (``ensure``)."""
        current, pending = await self._state(client)
        self.space_encrypted = current is not None
        self.pending_key_id = pending.key_id if pending is not None else None
        if current is None:
            return False
        await self._keep(secret, await self._key_for(secret, current))
        return True

    async def ensure(self, secret: Secret | None, client: SyncClient) -> SpaceKey | None:
        """Before a push or pull: the verified key, or ``WrongPassphrase`` (nothing sent yet).

        With a secret, a plain space is encrypted now (its history uploaded
        encrypted, the plain copies replaced) and an interrupted encryption is
        finished. Without one, an encrypted space is ``WrongPassphrase``.
        """
        current, pending = await self._state(client)
        self.space_encrypted = current is not None
        self.pending_key_id = pending.key_id if pending is not None else None
        if secret is None:
            if current is not None:
                raise WrongPassphrase(
                    "this sync space is end-to-end encrypted: set its passphrase in the sync settings"
                )
            self.key = None
            return None
        if current is not None:
            try:
                key = await self._key_for(secret, current)
            except WrongPassphrase:
                if pending is not None and not secret.is_locked:
                    try:
                        await derive_key(secret, pending, self.suite)
                    except WrongPassphrase:
                        pass
                    else:
                        raise WrongPassphrase(
                            "this is the new passphrase of a change still in progress: enter the "
                            "old one here, or finish the change where it started"
                        ) from None
                raise
            await self._keep(secret, key)
            return key
        if pending is not None:
            key = await self._key_for(secret, pending)
        else:
            if secret.is_locked:
                raise WrongPassphrase("enter the passphrase to encrypt this sync space")
            params, key = await new_params(secret, self.suite)
            await client.call("POST", "/v1/e2e/begin", body={"params": params.to_dict(), "from": None})
        await self._reencrypt(client, {}, key)
        self.space_encrypted = True
        await self._keep(secret, key)
        return key

    async def change(self, old: Secret, new: Secret, client: SyncClient) -> SpaceKey:
        """Re-encrypt the space from ``old``'s key to ``new``'s (resumable; see the module doc)."""
        if new.is_locked:
            raise ValidationError("the new passphrase is empty", field="encryption")
        key = await self.ensure(old, client)
        if key is None:
            raise ValidationError("sync is not encrypted: configure encryption first", field="encryption")
        _, pending = await self._state(client)
        if pending is not None:
            try:
                new_key = await derive_key(new, pending, self.suite)
            except WrongPassphrase:
                raise WrongPassphrase(
                    "another passphrase change is in progress: finish it with that new passphrase"
                ) from None
        else:
            params, new_key = await new_params(new, self.suite)
            await client.call("POST", "/v1/e2e/begin", body={"params": params.to_dict(), "from": key.key_id})
        await self._reencrypt(client, {key.key_id: key}, new_key)
        await self._store.kv_set(KEY_KV, None)
        await self._keep(new, new_key)
        return new_key

    async def _reencrypt(self, client: SyncClient, old: Mapping[str, SpaceKey], new: SpaceKey) -> None:
        keys = {**old, new.key_id: new}
        for _ in range(_MAX_ROUNDS):
            after: str | None = None
            while True:
                page = await client.call(
                    "GET", "/v1/e2e/pending", {"after": after, "limit": str(REWRITE_BATCH)}
                )
                records = page.get("records") if isinstance(page, dict) else None
                if not isinstance(records, list):
                    raise SyncTransientError("/v1/e2e/pending: malformed answer", status=200)
                if records:
                    await self._rewrite(client, records, keys, new)
                after = str(page.get("after") or "")
                if not page.get("more"):
                    break
            try:
                await client.call("POST", "/v1/e2e/commit", body={"key_id": new.key_id})
                return
            except SyncPermanentError as e:
                if e.status != 409 or "e2e-not-done" not in (e.response or ""):
                    raise
                log.info("re-encryption: records changed meanwhile, another round")
        raise SyncTransientError("re-encryption did not settle: records keep changing; try again")

    async def _rewrite(
        self,
        client: SyncClient,
        records: Sequence[Mapping[str, Any]],
        keys: Mapping[str, SpaceKey],
        new: SpaceKey,
    ) -> None:
        for r in records:
            unknown = {k for k in envelope_key_ids(r.get("data")) if k is not None and k not in keys}
            if unknown:
                raise WrongPassphrase("some records are under a key this device does not have")
        plain = await decrypt_records(records, keys, self.suite, allow_plain=True)
        ops = [
            {
                "op_id": "rekey-" + self._ids(),
                "resource": r["resource"],
                "id": r["id"],
                "hlc": r["hlc"],
                "data": d,
            }
            for r, d in zip(records, plain)
        ]
        sealed = await encrypt_records(ops, new, self.suite)
        rewritten = [
            {"resource": o["resource"], "id": o["id"], "hlc": o["hlc"], "data": d}
            for o, d in zip(ops, sealed)
        ]
        body = {"key_id": new.key_id, "records": rewritten}
        answer = await client.call("POST", "/v1/e2e/rewrite", body=body)
        results = answer.get("results", []) if isinstance(answer, dict) else []
        statuses = [r.get("status") for r in results if isinstance(r, dict)]
        self.rewritten += statuses.count("rewritten")
        if "rejected" in statuses:
            raise SyncPermanentError(
                "/v1/e2e/rewrite: the server refused a re-encrypted record",
                status=200,
                response=json.dumps(answer)[:2000],
            )

    # ------------------------------------------------------------------ per push / pull
    async def seal(self, ops: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The wire form of ``ops`` with their ``data`` encrypted (as is without a key)."""
        if self.key is None:
            return [dict(op) for op in ops]
        datas = await encrypt_records(ops, self.key, self.suite)
        return [dict(op, data=d) for op, d in zip(ops, datas)]

    async def open(
        self, changes: Sequence[Mapping[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[Quarantined]]:
        """Pulled changes with their ``data`` decrypted, and those that could not be: a record
        that fails to authenticate or names a key this device does not hold is quarantined
        on its own (``QuarantineKind`` ``"decryption"``). ``WrongPassphrase`` stops the
        whole pull when the device has no key for an encrypted space, or while another
        device changes the passphrase."""
        if self.key is None:
            for c in changes:
                if any(k is not None for k in _key_ids(c.get("data"))):
                    raise WrongPassphrase(
                        "this sync space holds end-to-end encrypted records: set its passphrase"
                    )
            return [dict(c) for c in changes], []
        pending = self.pending_key_id
        if pending is not None and any(pending in _key_ids(c.get("data")) for c in changes):
            raise WrongPassphrase(
                "a passphrase change is in progress on another device: pulling waits for it "
                "(then enter the new passphrase here)"
            )
        opened = await decrypt_each(
            changes, {self.key.key_id: self.key}, self.suite, allow_plain=not self.space_encrypted
        )
        good: list[dict[str, Any]] = []
        bad: list[Quarantined] = []
        for c, d in zip(changes, opened):
            if isinstance(d, Exception):
                bad.append(quarantined(c, "decryption", str(d)))
            else:
                good.append(dict(c, data=d))
        return good, bad


def _key_ids(data: Any) -> set[str | None]:
    """``envelope_key_ids`` of a pulled record's data (none for data that is not an object)."""
    return envelope_key_ids(data) if isinstance(data, Mapping) else set()
