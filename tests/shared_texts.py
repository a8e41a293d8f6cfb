"""The texts of the shared folder (the LoCoMo conversations and the real chat-export
fixtures), read in place: what the tokeniser's parity tests run on."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """``$CHATMEM_SHARED``, or a ``shared/`` folder beside the repository (searched upward).
    Where there is none, the calling test is skipped, saying so."""
    env = os.environ.get("CHATMEM_SHARED")
    if env:
        return Path(env)
    for base in REPO.parents:
        if (base / "shared" / "quality").is_dir():
            return base / "shared"
    pytest.skip(
        "the shared folder (LoCoMo conversations, chat-export fixtures) is not beside this checkout: "
        "set CHATMEM_SHARED to run this test"
    )


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def real_texts() -> list[str]:
    """Every string of the LoCoMo conversations and of the chat-export fixtures."""
    root = shared_dir()
    files = sorted((root / "quality" / "locomo-dev").glob("*.json")) + sorted(
        (root / "fixtures").rglob("*.json")
    )
    out: list[str] = []
    for f in files:
        out.extend(_strings(json.loads(f.read_text("utf-8"))))
    return out
