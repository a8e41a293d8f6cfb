"""The app's settings: defaults, validation and persistence in the store's kv.

Stored under one kv key (``app:settings``) as a plain dict: durable in
IndexedDB when ``save`` returns. API keys stay on this device (the kv store
is never part of an export).
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlsplit

__all__ = ["KEY", "DEFAULTS", "load", "save", "merge", "validate", "provider_configured"]

KEY = "app:settings"

DEFAULTS: dict[str, Any] = {
    "provider": {"base_url": "", "api_key": "", "model": "", "system_prompt": "You are a helpful assistant."},
    "budget": "gpt-4o",
    "retrieval": {"strategy": "recent", "recent_count": 10, "relevance_threshold": 0.3,
                  "weights": {"recency": 0.5, "relevance": 0.5}},
    "retention": {"max_sessions": 1000, "max_age_days": 90, "archive_after_days": 30,
                  "delete_archived": False, "auto": False},
    "sync": {"enabled": False, "endpoint": "", "api_key": "", "interval_s": 60},
}


def merge(base: dict[str, Any], over: dict[str, Any] | None) -> dict[str, Any]:
    """``base`` updated by ``over`` (nested dicts merged; unknown keys dropped)."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if k not in out:
            continue
        if isinstance(out[k], dict) and isinstance(v, dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def _url(value: str, field: str) -> list[str]:
    if not value:
        return []
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return [f"{field}: must be an http(s) URL such as https://api.example.com/v1"]
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost"):
        return [f"{field}: plain http is only allowed for this computer (127.0.0.1 / localhost); use https"]
    return []


def validate(s: dict[str, Any]) -> list[str]:
    """Problems with ``s``, as sentences naming the field (empty when valid)."""
    errs = _url(s["provider"]["base_url"], "Provider base URL") + _url(s["sync"]["endpoint"], "Sync endpoint")
    if s["provider"]["base_url"] and not s["provider"]["model"]:
        errs.append("Model: name the model to use with this provider")
    r = s["retrieval"]
    if r["strategy"] not in ("recent", "relevant", "hybrid"):
        errs.append("Retrieval strategy: recent, relevant or hybrid")
    for name, lo, hi in (("recent_count", 0, 1000),):
        if not isinstance(r[name], int) or not lo <= r[name] <= hi:
            errs.append(f"Recent messages: a whole number from {lo} to {hi}")
    for name in ("relevance_threshold",):
        if not isinstance(r[name], (int, float)) or not 0 <= r[name] <= 1:
            errs.append("Relevance threshold: a number from 0 to 1")
    for w in ("recency", "relevance"):
        if not isinstance(r["weights"][w], (int, float)) or not 0 <= r["weights"][w] <= 1:
            errs.append(f"{w.capitalize()} weight: a number from 0 to 1")
    for name in ("max_sessions", "max_age_days", "archive_after_days"):
        v = s["retention"][name]
        if not isinstance(v, int) or v < 0:
            errs.append(f"Retention {name.replace('_', ' ')}: a whole number, 0 or more")
    if not isinstance(s["sync"]["interval_s"], int) or s["sync"]["interval_s"] < 5:
        errs.append("Sync interval: at least 5 seconds")
    if s["sync"]["enabled"] and not (s["sync"]["endpoint"] and s["sync"]["api_key"]):
        errs.append("Sync: an endpoint and a key are needed to turn sync on")
    return errs


def provider_configured(s: dict[str, Any]) -> bool:
    p = s["provider"]
    return bool(p["base_url"] and p["model"])


async def load(mem: Any) -> dict[str, Any]:
    return merge(DEFAULTS, await mem.store.kv_get(KEY))


async def save(mem: Any, s: dict[str, Any]) -> None:
    """Durable when it returns (one kv write)."""
    await mem.store.kv_set(KEY, s)
