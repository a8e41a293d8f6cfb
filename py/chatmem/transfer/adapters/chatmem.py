"""chatmem's own export (``{"version": "1.0.0", "exportedAt", "sessions": [{meta, messages}]}``).

Ids are the export's own; ``validate_export`` checks every record.
"""

from __future__ import annotations

from typing import Any

from ...records.ids import IdGenerator
from ..normalized import NormalizedImport
from ..validate import validate_export

__all__ = ["NAME", "detect", "to_normalized"]

NAME = "chatmem"


def detect(data: Any) -> bool:
    """An object with a ``sessions`` array and a ``version`` or ``exportedAt`` (any version:
    a wrong one is then reported as such, not as an unknown format)."""
    return (
        isinstance(data, dict)
        and "format" not in data
        and isinstance(data.get("sessions"), list)
        and ("version" in data or "exportedAt" in data)
    )


def to_normalized(data: Any, *, ids: IdGenerator | None = None) -> NormalizedImport:
    """The export's sessions and messages, validated, with their own ids (``ids`` is unused)."""
    return validate_export(data)
