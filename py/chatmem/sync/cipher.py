"""The CPython ``CipherSuite``: ``cryptography`` (the page runtime has its own on
WebCrypto, ``chatmem.runtime.page.WebCryptoSuite``). Both give the same bytes for
the same inputs; each runtime's ``cipher_suite()`` gives its own."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..errors import UnsupportedEnvironment
from .encryption import CipherSuite

__all__ = ["CryptographySuite", "default_suite"]


class CryptographySuite:
    """AES-256-GCM from the ``cryptography`` package, PBKDF2 from ``hashlib`` (CPython)."""

    def __init__(self) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as e:  # pragma: no cover - a core dependency on CPython
            raise UnsupportedEnvironment(
                "end-to-end encrypted sync needs the 'cryptography' package (pip install chatmem installs it)"
            ) from e
        self._aesgcm = AESGCM

    async def pbkdf2_sha256(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac("sha256", password, salt, iterations, 32)

    async def seal_many(self, key: bytes, items: Sequence[tuple[bytes, bytes, bytes]]) -> list[bytes]:
        aead = self._aesgcm(key)
        return [aead.encrypt(iv, pt, ad) for iv, pt, ad in items]

    async def open_many(self, key: bytes, items: Sequence[tuple[bytes, bytes, bytes]]) -> list[bytes | None]:
        from cryptography.exceptions import InvalidTag

        aead = self._aesgcm(key)
        out: list[bytes | None] = []
        for iv, ct, ad in items:
            try:
                out.append(aead.decrypt(iv, ct, ad))
            except InvalidTag:
                out.append(None)
        return out


def default_suite() -> CipherSuite:
    """``cryptography``'s suite (what a synchronizer made without a runtime uses)."""
    return CryptographySuite()
