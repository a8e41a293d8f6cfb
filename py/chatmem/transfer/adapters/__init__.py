"""Import adapters: one module per format, each with ``detect(data) -> bool`` and
``to_normalized(data, *, ids=None) -> NormalizedImport``.

``detect_format`` names the format of some input; ``convert`` turns it into a
validated ``NormalizedImport``; ``prepare_import`` is the one call an importer
needs (parse, detect, convert, and re-key unless ids are preserved);
``iter_import`` is the same with fresh ids, checked session by session as it is
read (a format whose module has ``iter_normalized``: one conversation at a
time). Pure: nothing here reads or writes a store.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Iterator

from ...errors import ImportFormatError, shown
from ...records.ids import IdGenerator
from ...records.validation import DEFAULT_LIMITS, Limits
from ..normalized import NormalizedImport, NormalizedSession, assign_new_ids
from ..source import describe, load_json
from ..validate import iter_validated, validate_loaded_export, validate_normalized
from . import airi, chatgpt, chatmem, claude

__all__ = ["ADAPTERS", "FORMATS", "detect_format", "convert", "prepare_import", "iter_import"]

#: detection order matters: the most specific shapes first
ADAPTERS: dict[str, ModuleType] = {
    chatmem.NAME: chatmem,
    airi.NAME: airi,
    chatgpt.NAME: chatgpt,
    claude.NAME: claude,
}
FORMATS: tuple[str, ...] = tuple(ADAPTERS)


def detect_format(data: Any) -> str:
    """The name of ``data``'s format (one of ``FORMATS``); ``ImportFormatError`` if none fits.

    ``data`` may be a dict, a list, or JSON text (``str`` / ``bytes``).
    """
    return _detect(load_json(data))


def _detect(data: Any) -> str:
    """``detect_format`` of data ``load_json`` gave."""
    for name, module in ADAPTERS.items():
        if module.detect(data):
            return name
    if isinstance(data, list) and not data:
        raise ImportFormatError("nothing to import: the input is an empty array")
    if isinstance(data, dict):
        keys = ", ".join(sorted(data)[:8]) or "none"
        shape = f"an object with keys: {keys}"
    elif isinstance(data, list):
        shape = f"an array whose first item is {describe(data[0])}"
    else:
        shape = describe(data)
    raise ImportFormatError(
        f"This is not in a format chatmem can read (it is {shape}): it reads chatmem backups, "
        "AIRI exports, ChatGPT's conversations.json and Claude's conversations.json."
    )


def convert(
    data: Any, format: str | None = None, *, ids: IdGenerator | None = None, limits: Limits = DEFAULT_LIMITS
) -> NormalizedImport:
    """Validated ``NormalizedImport`` from ``data`` in ``format`` (detected when None).

    Ids: a chatmem export keeps its own; every other format gets fresh ids
    from ``ids``. Raises ``ImportFormatError`` (a ``ValidationError``) naming
    the path of the first bad value; nothing is returned unless all of it is valid.
    """
    return _convert(load_json(data, limits), format, ids=ids, limits=limits)


def _convert(data: Any, format: str | None, *, ids: IdGenerator | None, limits: Limits) -> NormalizedImport:
    """``convert`` of data ``load_json`` gave."""
    if format is None:
        format = _detect(data)
    module = ADAPTERS.get(format)
    if module is None:
        raise ImportFormatError(
            f"unknown import format {shown(format)}; expected one of {list(FORMATS)}",
            path="format",
            field="format",
        )
    if format != chatmem.NAME and not module.detect(data):
        raise ImportFormatError(f"the input is not in the {shown(format)} format")
    if format == chatmem.NAME:
        return validate_loaded_export(data, limits=limits)
    normalized: NormalizedImport = module.to_normalized(data, ids=ids)
    # what an adapter made must pass the same checks as a chatmem export
    return validate_normalized(normalized, limits=limits)


def prepare_import(
    data: Any,
    *,
    format: str | None = None,
    preserve_ids: bool = False,
    ids: IdGenerator | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[str, NormalizedImport]:
    """``(format name, records to write)`` for an import.

    With ``preserve_ids=False`` a chatmem export is re-keyed with fresh
    session and message ids (fork links between imported sessions kept);
    foreign formats get ids derived from their source's ids (the same conversation
    imported twice has the same ids).
    """
    return _prepare(load_json(data, limits), format=format, preserve_ids=preserve_ids, ids=ids, limits=limits)


def _prepare(
    data: Any, *, format: str | None, preserve_ids: bool, ids: IdGenerator | None, limits: Limits
) -> tuple[str, NormalizedImport]:
    """``prepare_import`` of data ``load_json`` gave."""
    name = format or _detect(data)
    normalized = _convert(data, name, ids=ids, limits=limits)
    if name == chatmem.NAME and not preserve_ids:
        normalized = assign_new_ids(normalized, ids)
    return name, normalized


def iter_import(
    data: Any,
    *,
    format: str | None = None,
    ids: IdGenerator | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[str, Iterator[NormalizedSession]]:
    """``prepare_import`` with new ids, as ``(format name, checked sessions)``: a ChatGPT or
    Claude export is converted and checked one conversation at a time as the iterator is
    read, and raises ``ImportFormatError`` when it reaches the first bad value (a writer
    aborts what it wrote); any other format is prepared whole before this returns."""
    data = load_json(data, limits)
    name = format or _detect(data)
    module = ADAPTERS.get(name)
    stream = getattr(module, "iter_normalized", None)
    if stream is None or module is None or not module.detect(data):
        name, normalized = _prepare(data, format=name, preserve_ids=False, ids=ids, limits=limits)
        return name, iter(normalized)
    return name, iter_validated(stream(data, ids=ids), limits=limits)
