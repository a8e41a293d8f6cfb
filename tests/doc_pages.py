"""The project's written pages (the README and the documentation site's ``docs/``) and
their fenced code blocks, which the tests run or check by language."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is (``path:line``), its language and its code."""

    where: str
    lang: str
    code: str


def blocks(lang: str | None = None) -> list[Block]:
    """Every fenced block of every page, in order (only those of ``lang`` when given)."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
            if lang is None or m.group(1) == lang:
                line = text[: m.start()].count("\n") + 1
                out.append(Block(f"{page.relative_to(ROOT)}:{line}", m.group(1), m.group(2)))
    return out


def ids(items: list[Block]) -> list[str]:
    return [b.where for b in items]
