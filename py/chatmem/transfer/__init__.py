"""Export and import of conversations, as pure functions (no store access).

- ``build_export`` / ``iter_export_json`` / ``aiter_export_json``: the chatmem
  export (the original's ``ChatSessionsExport``), as a dict or streamed JSON text.
- ``validate_export``: check a whole chatmem export before anything is written.
- ``detect_format`` / ``convert`` / ``prepare_import``: read chatmem, AIRI,
  ChatGPT and Claude exports into a ``NormalizedImport`` (``(session record,
  message records)`` pairs) ready to be written in one transaction.
"""

from __future__ import annotations

from .adapters import FORMATS, convert, detect_format, prepare_import
from .export_format import (
    EXPORT_VERSION,
    aiter_export_json,
    build_export,
    canonical_dumps,
    dumps_export,
    iter_export_json,
)
from .normalized import NormalizedImport, assign_new_ids, count_messages
from .source import load_json
from .validate import SUPPORTED_VERSIONS, validate_export, validate_normalized

__all__ = [
    "EXPORT_VERSION",
    "SUPPORTED_VERSIONS",
    "FORMATS",
    "NormalizedImport",
    "build_export",
    "dumps_export",
    "iter_export_json",
    "aiter_export_json",
    "canonical_dumps",
    "validate_export",
    "validate_normalized",
    "detect_format",
    "convert",
    "prepare_import",
    "assign_new_ids",
    "count_messages",
    "load_json",
]
