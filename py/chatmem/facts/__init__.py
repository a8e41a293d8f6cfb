"""Memory of the person: facts learnt from conversations or stated by the user, each with
where it came from and when it was true (``records``), readable and correctable through
``mem.facts`` (``api``)."""

from __future__ import annotations

from ..records.facts import (
    FACT_ORIGINS,
    FACT_STATUSES,
    MULTI_VALUED,
    SINGLE_VALUED,
    Fact,
    FactOp,
    FactReport,
    check_fact_record,
)
from .api import FactHit, Facts
from .extract import FactExtractor
from .llm import LLMFactExtractor
from .offline import OfflineFactExtractor

__all__ = [
    "FACT_ORIGINS",
    "FACT_STATUSES",
    "MULTI_VALUED",
    "SINGLE_VALUED",
    "Fact",
    "FactExtractor",
    "FactHit",
    "FactOp",
    "FactReport",
    "Facts",
    "LLMFactExtractor",
    "OfflineFactExtractor",
    "check_fact_record",
]
