"""Keyboard-only use, labels, focus, contrast, a phone-sized screen; the
retention dry run and the data panel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.conftest import AppPage

UNNAMED = """() => [...document.querySelectorAll('#app button, #app input, #app select, #app textarea, #app a')]
  .filter(el => el.offsetParent !== null)
  .filter(el => {
    const name = (el.getAttribute('aria-label') || (el.labels && [...el.labels].map(l => l.textContent).join(''))
                  || (['BUTTON', 'A'].includes(el.tagName) && el.innerText) || el.title || '').trim();
    return !name;
  }).map(el => el.outerHTML.slice(0, 120))"""

CONTRAST = """([fgSel, bgSel, prop]) => {
  const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = c => { const [r, g, b] = c.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
                     return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const fg = rgb(getComputedStyle(document.querySelector(fgSel)).color);
  const bg = rgb(getComputedStyle(document.querySelector(bgSel))[prop || 'backgroundColor']);
  const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}"""


def focused(p: Any) -> str:
    return p.evaluate(
        "() => { const e = document.activeElement; return e.id || e.getAttribute('data-panel') "
        "|| e.getAttribute('data-action') || e.tagName; }"
    )


def test_keyboard_only(app: AppPage) -> None:
    p = app.page
    # the skip link leads straight to the message box
    p.keyboard.press("Tab")
    assert p.evaluate("document.activeElement.className") == "skip"
    p.keyboard.press("Enter")
    p.wait_for_function("() => document.activeElement.id === 'composer-input'")
    p.keyboard.type("Typed without a mouse")
    p.keyboard.press("Enter")
    p.wait_for_selector("#messages .msg.assistant.offline")
    # every control is reachable with Tab, in a sensible order
    seen = []
    p.focus("#new-session")
    for _ in range(40):
        seen.append(focused(p))
        p.keyboard.press("Tab")
    for want in (
        "new-session",
        "search-input",
        "view-active",
        "tag-filter",
        "open",
        "sync-chip",
        "context",
        "settings",
        "tag-input",
        "pin",
        "rename",
        "archive",
        "composer-input",
        "send-btn",
    ):
        assert want in seen, (want, seen)
    assert (
        seen.index("new-session")
        < seen.index("search-input")
        < seen.index("open")
        < seen.index("composer-input")
    )
    # a panel opens with Enter, takes focus, closes with Escape and gives focus back
    p.focus('.tools [data-panel="settings"]')
    p.keyboard.press("Enter")
    p.wait_for_function("() => document.activeElement.id === 'panel-title'")
    p.keyboard.press("Escape")
    p.wait_for_function("() => document.activeElement.getAttribute('data-panel') === 'settings'")
    assert p.locator("#panel").is_hidden()
    # ...but not from someone who went on to the composer before the panel was gone
    p.keyboard.press("Enter")
    p.wait_for_function("() => document.activeElement.id === 'panel-title'")
    p.evaluate(
        "() => { document.querySelector('#panel [data-action=close-panel]').click();"
        " document.querySelector('#composer-input').focus(); }"
    )
    p.wait_for_selector("#panel", state="hidden")
    p.wait_for_function("() => !document.querySelector('.tools [aria-pressed=true]')")
    assert focused(p) == "composer-input"
    # pin with the keyboard
    p.focus("#session-bar [data-action=pin]")
    p.keyboard.press("Enter")
    p.wait_for_selector("#session-list .group-label:has-text('Pinned')")
    p.wait_for_function(
        "() => document.activeElement.getAttribute('data-action') === 'pin' "
        "&& document.activeElement.innerText === 'Unpin'"
    )


def test_labels_focus_ring_and_contrast(app: AppPage) -> None:
    p = app.page
    app.new_session()
    app.send("Hello")
    assert p.evaluate(UNNAMED) == []
    for panel in ("context", "settings", "data", "insights", "sync"):
        p.evaluate(
            "() => document.activeElement && document.activeElement.blur()"
        )  # the last panel's title had it
        p.click(f'[data-panel="{panel}"] >> nth=0')
        # the panel is open once it is rendered and its title has the focus (the title's focus
        # comes last: a check before it, or the composer's focus below, would race with it)
        p.wait_for_function(
            "() => !document.querySelector('#panel').hidden"
            " && document.activeElement && document.activeElement.id === 'panel-title'"
        )
        assert p.evaluate(UNNAMED) == [], panel
    p.focus("#composer-input")
    assert p.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    for fg, bg, prop in (
        ("body", "body", None),
        (".msg .role", ".msg.assistant", None),
        ("#mode-note", ".composer", None),
        ("#send-btn", "#send-btn", None),
        (".session .meta", ".sidebar", None),
    ):
        ratio = p.evaluate(CONTRAST, [fg, bg, prop])
        assert ratio >= 4.5, (fg, bg, ratio)


def test_phone_sized_screen(app_factory: Callable[..., AppPage]) -> None:
    a = app_factory(viewport={"width": 390, "height": 844})
    p = a.page
    a.send("Works on a phone")
    assert p.evaluate("document.documentElement.scrollWidth") <= 390
    # the sidebar is off-screen until asked for
    side = p.locator("#sidebar").bounding_box()
    assert side["x"] + side["width"] <= 0
    p.click("[data-action=toggle-sidebar]")
    p.wait_for_function("() => document.querySelector('#sidebar').getBoundingClientRect().x >= 0")
    assert p.get_attribute("[data-action=toggle-sidebar]", "aria-expanded") == "true"
    p.click("#session-list .session")
    p.wait_for_function("() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0")
    # composer and send button are on screen; a panel takes the whole width
    for sel in ("#composer-input", "#send-btn"):
        box = p.locator(sel).bounding_box()
        assert 0 <= box["x"] and box["x"] + box["width"] <= 390 and box["y"] + box["height"] <= 844, sel
    p.click('.tools [data-panel="settings"]')
    p.wait_for_selector("#panel:not([hidden])")
    assert p.locator("#panel").bounding_box()["width"] == 390
    assert p.evaluate("document.documentElement.scrollWidth") <= 390


def test_retention_dry_run_changes_nothing_then_applies(app: AppPage) -> None:
    p = app.page
    app.py(f"""
import chatmem, time, chatmem_app
mem = await chatmem.open({app.db!r})
old = int(time.time() * 1000) - 45 * 86_400_000
await mem.sessions.create(title="Forgotten chat", created_at=old)
pinned = await mem.sessions.create(title="Pinned old chat", created_at=old)
await mem.sessions.pin(pinned.session_id)
await mem.sessions.create(title="Fresh chat")
await chatmem_app.app.refresh_sessions()
""")
    p.click('.tools [data-panel="settings"]')
    p.click("[data-action=retention-preview]")
    p.wait_for_selector("#retention-preview li")
    preview = p.locator("#retention-preview").inner_text()
    assert "Dry run" in preview and "archive 1: “Forgotten chat”" in preview and "Pinned" not in preview
    archived = f"""
import chatmem
mem = await chatmem.open({app.db!r})
sorted(s.title for s in await mem.sessions.list(archived=True))"""
    assert app.py(archived) == []
    p.click("[data-action=retention-apply]")
    p.wait_for_selector("#retention-preview:has-text('Applied: 1 archived, 0 deleted')")
    assert app.py(archived) == ["Forgotten chat"]


def test_data_panel_storage_and_persistence(app: AppPage) -> None:
    p = app.page
    app.new_session()
    app.send("Something worth keeping")
    p.click('.tools [data-panel="data"]')
    p.wait_for_selector("#storage-usage")
    assert p.locator("#storage-usage").inner_text() != "unknown"
    before = p.locator("#persist-state").inner_text()
    p.click("[data-action=persist]")
    p.wait_for_function("b => document.querySelector('#persist-state').innerText !== b", arg=before)
    has = app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
[hasattr(mem, "export"), hasattr(mem, "import_sessions")]""")
    # export/import are enabled exactly when this build has them, and say so when not
    assert p.locator("[data-action=export-all]").is_enabled() == has[0]
    assert p.locator("#import-file").is_enabled() == has[1]
    if not has[0]:
        assert "mem.export" in p.locator("#panel-body").inner_text()
