"""Applying the saved settings to ``mem`` (no view code): sync through
``mem.sync.configure`` (which starts or stops auto-sync) and the retention
schedule through ``mem.retention.schedule``. Views pass callbacks for what
they show; the controller calls these after settings are saved or loaded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import chatmem
from chatmem.errors import SyncError, WrongPassphrase

from . import settings

__all__ = ["apply_retention_schedule", "apply_sync", "resume"]

#: called after a scheduled retention run that archived or deleted something
OnRetention = Callable[[Any], Awaitable[None]]


async def apply_sync(mem: Any, prefs: dict[str, Any]) -> None:
    """Hand the saved sync settings to ``mem.sync.configure`` (durable in kv when this returns).

    A passphrase in ``prefs`` goes to ``mem.sync`` and is cleared from ``prefs``: only
    ``has_passphrase`` says one was entered. With sync on it is checked at once against
    the server (``mem.sync.unlock``): ``WrongPassphrase`` when it does not match, and
    the config stays as it was, locked; when the server cannot be asked now it is kept
    and checked by the next sync."""
    sy = prefs["sync"]
    if mem.sync.config is None and not sy["enabled"] and not sy["endpoint"]:
        return
    typed, sy["passphrase"] = sy["passphrase"], ""  # from here on only mem.sync holds it
    check = bool(typed and sy["encrypt"] and sy["enabled"])
    cfg = await mem.sync.configure(
        settings.sync_config(dict(prefs, sync=dict(sy, passphrase=typed)), mem.sync.config, typed=not check)
    )
    if check:
        try:
            cfg = await mem.sync.unlock(chatmem.Passphrase(typed, remember=bool(sy["remember"])))
        except WrongPassphrase:
            sy["has_passphrase"] = False
            raise
        except SyncError:  # cannot be checked now: the next sync checks it
            cfg = await mem.sync.configure(
                settings.sync_config(dict(prefs, sync=dict(sy, passphrase=typed)), mem.sync.config)
            )
    sy["has_passphrase"] = bool(cfg.encryption and await mem.sync.unlocked())


def apply_retention_schedule(mem: Any, prefs: dict[str, Any], on_run: OnRetention) -> None:
    """Start ``mem.retention.schedule`` with the saved policy when it is turned on; stop it otherwise.

    ``on_run(report)`` follows each scheduled run that changed something.
    """
    ret = prefs["retention"]
    if not ret["auto"]:
        mem.retention.stop()
        return
    seen: list[Any] = [None]

    async def nap(seconds: float) -> None:
        # after each scheduled run: report what it changed, then wait for the next
        report = mem.retention.last_report
        if report is not None and report is not seen[0] and (report.archived or report.deleted):
            seen[0] = report
            await on_run(report)
        await asyncio.sleep(seconds)

    mem.retention.schedule(settings.retention_policy(ret), sleep=nap)


def apply_memory(mem: Any, prefs: dict[str, Any]) -> None:
    """Learning about the person: in the background while ``learn`` is on, kept pending
    for the user's approval while ``review`` is."""
    mem.facts.configure(auto=bool(prefs["memory"]["learn"]), review=bool(prefs["memory"]["review"]))


def resume(mem: Any, prefs: dict[str, Any], on_run: OnRetention) -> None:
    """After a reload: resume auto-sync from the stored config and the retention schedule if on."""
    cfg = mem.sync.config
    if cfg is not None and cfg.enabled and cfg.auto_sync:
        mem.sync.start()
    apply_retention_schedule(mem, prefs, on_run)
