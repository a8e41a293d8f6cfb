"""The app's settings: defaults, validation, persistence, and the chatmem
objects they stand for (provider, budget, retrieval, retention, sync).

Stored under one kv key (``app:settings``) as a plain dict, durable in
IndexedDB when ``save`` returns — except the sync part, which lives where
``mem.sync`` keeps it (``mem.sync.configure``, kv ``sync.config``). API keys
stay on this device: the kv store is never part of an export.
"""

from __future__ import annotations

import copy
from typing import Any

import chatmem
from chatmem.conversations.retention import DAY_MS
from chatmem.errors import ValidationError

__all__ = [
    "DEFAULTS",
    "KEY",
    "chat_provider",
    "load",
    "merge",
    "provider_configured",
    "retention_policy",
    "retrieval_config",
    "save",
    "sync_config",
    "validate",
]

KEY = "app:settings"
#: where a turn may recall older messages from (``RetrievalConfig.scope``), in the form's words
SCOPES = {
    "session": "This conversation only",
    "character": "This character's conversations",
    "user": "All my conversations",
}
#: the relevance threshold's default before similarities were calibrated per embedder
OLD_THRESHOLD = 0.3

DEFAULTS: dict[str, Any] = {
    "provider": {"base_url": "", "api_key": "", "model": "", "system_prompt": "You are a helpful assistant."},
    "budget": "gpt-4o",
    # the original's relevanceThreshold; similarities are calibrated per embedder, so 0.7
    # keeps a paraphrase and drops an unrelated message with any of them
    # "scope": where relevant older messages may come from; the character's other
    # conversations by default, so a new chat recalls what was said in another
    "retrieval": {
        "strategy": "recent",
        "recent_count": 10,
        "relevance_threshold": 0.7,
        "weights": {"recency": 0.6, "relevance": 0.4},
        "calibrated": True,
        "scope": "character",
    },
    "context": {"datetime": True},
    # what the companion learns about the person: on by default in the app
    "memory": {"learn": True, "review": False},
    "retention": {
        "max_sessions": 1000,
        "max_age_days": 90,
        "archive_after_days": 30,
        "delete_archived": False,
        "auto": False,
    },
    "sync": {
        "enabled": False,
        "endpoint": "",
        "api_key": "",
        "interval_s": 60,
        "auto": True,
        # end-to-end encryption; the passphrase lives only in memory until handed to mem.sync
        "encrypt": False,
        "passphrase": "",
        "remember": False,
    },
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
    from urllib.parse import urlsplit  # on use: it loads ipaddress, costly at start-up in the page

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return [f"{field}: must be an http(s) URL such as https://api.example.com/v1"]
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost"):
        return [f"{field}: plain http is only allowed for this computer (127.0.0.1 / localhost); use https"]
    return []


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate(s: dict[str, Any]) -> list[str]:
    """Problems with ``s``, as sentences naming the field (empty when valid)."""
    errs = _url(s["provider"]["base_url"], "Provider base URL") + _url(s["sync"]["endpoint"], "Sync endpoint")
    if s["provider"]["base_url"] and not s["provider"]["model"]:
        errs.append("Model: name the model to use with this provider")
    if s["budget"] not in chatmem.PRESETS:
        errs.append(f"Token budget: one of {', '.join(chatmem.PRESETS)}")
    r = s["retrieval"]
    if r["strategy"] not in ("recent", "relevant", "hybrid"):
        errs.append("Retrieval strategy: recent, relevant or hybrid")
    if r["scope"] not in SCOPES:
        errs.append("Recall from: this conversation, the character's conversations, or all of them")
    if not isinstance(r["recent_count"], int) or not 1 <= r["recent_count"] <= 1000:
        errs.append("Recent messages: a whole number from 1 to 1000")
    if not _num(r["relevance_threshold"]) or not 0 <= r["relevance_threshold"] <= 1:
        errs.append("Relevance threshold: a number from 0 to 1")
    for w in ("recency", "relevance"):
        if not _num(r["weights"][w]) or not 0 <= r["weights"][w] <= 1:
            errs.append(f"{w.capitalize()} weight: a number from 0 to 1")
    for name in ("max_sessions", "max_age_days", "archive_after_days"):
        v = s["retention"][name]
        if not isinstance(v, int) or v < 0:
            errs.append(f"Retention {name.replace('_', ' ')}: a whole number, 0 or more")
    sy = s["sync"]
    if not isinstance(sy["interval_s"], int) or sy["interval_s"] < 5:
        errs.append("Sync interval: at least 5 seconds")
    if sy["enabled"] and not (sy["endpoint"] and sy["api_key"]):
        errs.append("Sync: an endpoint and a key are needed to turn sync on")
    if not any(e.startswith("Sync") for e in errs):
        try:
            sync_config(s)
        except ValidationError as e:
            errs.append(f"Sync {e.field or ''}: {e}".replace("  ", " "))
    return errs


def provider_configured(s: dict[str, Any]) -> bool:
    p = s["provider"]
    return bool(p["base_url"] and p["model"])


def chat_provider(mem: Any, s: dict[str, Any]) -> Any:
    """The configured model, or the offline responder that answers from ``mem``."""
    if provider_configured(s):
        p = s["provider"]
        return chatmem.OpenAICompatibleProvider(p["base_url"], p["api_key"] or None, p["model"])
    return chatmem.OfflineResponder(mem)


def retrieval_config(s: dict[str, Any]) -> chatmem.RetrievalConfig:
    r = s["retrieval"]
    return chatmem.RetrievalConfig(
        strategy=r["strategy"],
        recent_count=r["recent_count"],
        relevance_threshold=float(r["relevance_threshold"]),
        hybrid_weights=chatmem.HybridWeights(
            recency=float(r["weights"]["recency"]), relevance=float(r["weights"]["relevance"])
        ),
        scope=r["scope"],
    )


def retention_policy(ret: dict[str, Any]) -> chatmem.RetentionPolicy:
    return chatmem.RetentionPolicy(
        max_sessions=ret["max_sessions"],
        max_age=ret["max_age_days"] * DAY_MS,
        archive_after=ret["archive_after_days"] * DAY_MS,
        delete_archived=ret["delete_archived"],
    )


def sync_config(s: dict[str, Any], current: Any = None, *, typed: bool = True) -> chatmem.SyncConfig:
    """``ValidationError`` (naming the field) when the sync settings are not valid.

    An empty passphrase field keeps the passphrase already entered (``current``'s),
    or a locked one that waits for it ("Unlock sync"). ``typed``: the passphrase in the
    form goes into the config as it is (else ``apply_sync`` checks it first)."""
    sy = s["sync"]
    enc = None
    if sy["encrypt"]:
        if sy["passphrase"] and typed:
            enc = chatmem.Passphrase(sy["passphrase"], remember=bool(sy["remember"]))
        elif current is not None and current.encryption is not None and not current.encryption.is_locked:
            enc = current.encryption
            enc.remember = bool(sy["remember"])
        else:
            enc = chatmem.Passphrase.locked(remember=bool(sy["remember"]))
    return chatmem.SyncConfig(
        enabled=sy["enabled"],
        endpoint=sy["endpoint"],
        api_key=sy["api_key"],
        auto_sync=bool(sy["enabled"] and sy["auto"]),
        sync_interval=sy["interval_s"] * 1000,
        encryption=enc,
    )


async def load(mem: Any) -> dict[str, Any]:
    """The stored settings over the defaults; the sync part from ``mem.sync``'s stored config."""
    stored = await mem.store.kv_get(KEY)
    s = merge(DEFAULTS, stored)
    r = (stored or {}).get("retrieval") or {}
    if r and not r.get("calibrated") and r.get("relevance_threshold") == OLD_THRESHOLD:
        # saved before similarities were calibrated: the old default meant what 0.7 means now
        s["retrieval"]["relevance_threshold"] = DEFAULTS["retrieval"]["relevance_threshold"]
    await mem.sync.status()  # reads the stored sync config
    cfg = mem.sync.config
    if cfg is not None:
        enc = cfg.encryption
        s["sync"] = {
            "enabled": cfg.enabled,
            "endpoint": cfg.endpoint,
            "api_key": cfg.api_key,
            "interval_s": cfg.sync_interval // 1000,
            "auto": cfg.auto_sync or not cfg.enabled,
            "encrypt": enc is not None,
            "passphrase": "",
            "remember": bool(enc and enc.remember),
            "has_passphrase": bool(enc and await mem.sync.unlocked()),
        }
    return s


async def save(mem: Any, s: dict[str, Any]) -> None:
    """Durable when it returns (one kv write; the sync part goes to ``mem.sync.configure``)."""
    await mem.store.kv_set(KEY, {k: v for k, v in s.items() if k != "sync"})
