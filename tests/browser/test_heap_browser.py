"""The page's boot leaves Python's cyclic collector only what the page makes after it."""

from __future__ import annotations

import pytest

from conftest import Page

pytestmark = pytest.mark.browser


def test_the_boot_objects_are_frozen_out_of_the_collector(page: Page) -> None:
    """``loadChatmem`` freezes what the boot made (modules, classes, functions): a full
    collection then scans only what came after, not the tens of thousands of objects a
    pass over the old generation held the main thread with (60-90 ms with the app)."""
    got = page.py("import gc\n{'frozen': gc.get_freeze_count(), 'tracked': len(gc.get_objects())}")
    assert got["frozen"] > 10_000, got
    assert got["tracked"] < got["frozen"], got
