"""The main screens render, from a seeded conversation history; each shot
asserts the screen it shows. With ``CHATMEM_SCREENSHOTS=1`` the shots are
written to docs/screenshots/ for the docs; otherwise nothing is written,
so a test run leaves the work tree as it was."""

from __future__ import annotations

from collections.abc import Callable

from app.conftest import AppPage, shot

SEED = r"""
import chatmem, json, time, chatmem_app
mem = await chatmem.open(DB)
now = int(time.time() * 1000)
day = 86_400_000
def at(d): return now - d * day
a = await mem.sessions.create(title="Lisbon trip in May", character_id="airi", tags=["travel"], created_at=at(6))
await mem.messages.append_many(a.session_id, [
  {"role": "user", "content": "We're going to Lisbon in May. Where should we stay?", "created_at": at(6)},
  {"role": "assistant", "content": "**Alfama** is charming and hilly; **Príncipe Real** is calmer.\n\n- Alfama: fado, views\n- Baixa: central, flat\n- Príncipe Real: gardens, cafés", "created_at": at(6), "model": "gpt-4o-mini"},
  {"role": "user", "content": "How do we get from the airport?", "created_at": at(5)},
  {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "transit_lookup", "arguments": json.dumps({"from": "LIS", "to": "Alfama"})}}], "created_at": at(5), "model": "gpt-4o-mini"},
  {"role": "tool", "content": json.dumps({"metro": "red line, 20 min", "taxi": "15 min"}), "tool_call_id": "c1", "name": "transit_lookup", "created_at": at(5)},
  {"role": "assistant", "content": "Take the red metro line (about 20 minutes) or a taxi (about 15). Keep `Viva Viagem` cards for the metro.", "created_at": at(5), "model": "gpt-4o-mini"},
])
await mem.sessions.pin(a.session_id)
b = await mem.sessions.create(title="Sourdough starter", tags=["cooking"], created_at=at(3))
await mem.messages.append_many(b.session_id, [
  {"role": "user", "content": "My starter smells like nail polish", "created_at": at(3)},
  {"role": "assistant", "content": "That's acetone from a hungry starter: feed it more often, 1:5:5.", "created_at": at(3), "model": "gpt-4o-mini"},
])
c = await mem.sessions.create(title="Chess openings", character_id="coach", tags=["games"], created_at=at(1))
await mem.messages.append_many(c.session_id, [
  {"role": "user", "content": "Explain the Queen's Gambit in one line", "created_at": at(1)},
  {"role": "assistant", "content": "White offers a pawn on c4 to win the centre.", "created_at": at(1), "model": "gpt-4o-mini"},
])
await chatmem_app.app.refresh_sessions()
await chatmem_app.app.open_session(a.session_id)
"""


def test_screenshots_of_the_main_screens(app_factory: Callable[..., AppPage]) -> None:
    a = app_factory(viewport={"width": 1280, "height": 800})
    p = a.page
    a.py(SEED.replace("DB", repr(a.db)))
    p.wait_for_selector("#conv-title:has-text('Lisbon trip in May')")
    a.send("What did we say about the metro?")
    assert "red metro line" in p.locator("#messages .msg.assistant").last.inner_text()
    p.locator("#messages details").first.click()
    p.evaluate("document.querySelector('#conversation').scrollTop = 1e9")
    shot(p, "chat")

    p.fill("#search-input", "starter")
    p.press("#search-input", "Enter")
    p.wait_for_selector("#search-results .hit")
    assert "nail polish" in p.locator("#search-results .hit").first.inner_text()
    shot(p, "search")
    p.click("#search-results [data-action=search-clear]")

    for panel, check in (
        ("context", "#ctx-tokens"),
        ("settings", "#settings-form"),
        ("insights", "svg.chart"),
        ("data", "#storage-usage"),
    ):
        p.click(f'.tools [data-panel="{panel}"]')
        p.wait_for_selector(f"#panel {check}")
        shot(p, panel)
    p.click("#sync-chip")
    p.wait_for_selector("#sync-state:text-is('Sync off')")
    shot(p, "sync")
    p.click("[data-action=close-panel]")

    phone = app_factory(viewport={"width": 390, "height": 844}, db=a.db)
    phone.page.wait_for_selector("#messages .msg")
    shot(phone.page, "phone")
    phone.page.click("[data-action=toggle-sidebar]")
    phone.page.wait_for_function("() => document.querySelector('#sidebar').getBoundingClientRect().x >= 0")
    phone.page.wait_for_timeout(300)
    shot(phone.page, "phone-sidebar")
