"""Applying the saved settings to ``mem`` (no view code): sync through
``mem.sync.configure`` (which starts or stops auto-sync) and the retention
schedule through ``mem.retention.schedule``. Views pass callbacks for what
they show; the controller calls these after settings are saved or loaded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from . import settings

__all__ = ["apply_retention_schedule", "apply_sync", "resume"]

#: called after a scheduled retention run that archived or deleted something
OnRetention = Callable[[Any], Awaitable[None]]


async def apply_sync(mem: Any, prefs: dict[str, Any]) -> None:
    """Hand the saved sync settings to ``mem.sync.configure`` (durable in kv when this returns).

    A passphrase in ``prefs`` goes to ``mem.sync`` and is cleared from ``prefs``:
    only ``has_passphrase`` says one was entered."""
    if mem.sync.config is not None or prefs["sync"]["enabled"] or prefs["sync"]["endpoint"]:
        cfg = await mem.sync.configure(settings.sync_config(prefs, mem.sync.config))
        enc = cfg.encryption
        # the passphrase now lives only inside mem.sync; the form never shows it again
        prefs["sync"].update(passphrase="", has_passphrase=bool(enc and not enc.is_locked))


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


def resume(mem: Any, prefs: dict[str, Any], on_run: OnRetention) -> None:
    """After a reload: resume auto-sync from the stored config and the retention schedule if on."""
    cfg = mem.sync.config
    if cfg is not None and cfg.enabled and cfg.auto_sync:
        mem.sync.start()
    apply_retention_schedule(mem, prefs, on_run)
