"""Your data through the interface: export as a download, import into a fresh
profile by file picker and by drag and drop (same sessions), a report, and a
clear message for a file that is not an export (nothing written)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.conftest import AppPage
from conftest import unique_name

SEED = """
import chatmem, chatmem_app
mem = await chatmem.open(DB)
a = await mem.sessions.create(title="Lisbon trip", character_id="airi", tags=["travel"])
await mem.messages.append_many(a.session_id, [
    {"role": "user", "content": "Where should we stay in Lisbon?"},
    {"role": "assistant", "content": "Alfama is charming.", "model": "gpt-4o-mini", "provider": "openai"}])
await mem.sessions.pin(a.session_id)
b = await mem.sessions.create(title="Bread", tags=["cooking"])
await mem.messages.append(b.session_id, "user", "My starter smells like nail polish")
c = await mem.sessions.create(title="Chess")
await mem.messages.append(c.session_id, "user", "Explain the Queen's Gambit")
await chatmem_app.app.refresh_sessions()
"""

SNAPSHOT = """
import chatmem
mem = await chatmem.open(DB)
out = []
for s in await mem.sessions.list(limit=None, archived=None):
    out.append([s.title, s.character_id, s.tags, s.pinned,
                [[m.role, m.content, m.model] for m in await mem.messages.list(s.session_id, limit=None)]])
sorted(out)
"""


@pytest.fixture
def fresh(browser: Any, site: str) -> Iterator[Any]:
    """A second, empty browser profile (its own IndexedDB)."""
    ctx = browser.new_context(accept_downloads=True)
    yield ctx
    ctx.close()


def export(app: AppPage, tmp_path: Path, action: str) -> Path:
    p = app.page
    p.click(".tools [data-panel=data]")
    p.wait_for_selector("#storage-usage")
    with p.expect_download() as dl:
        p.click(f"[data-action={action}]")
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    return path


def drop_file(page: Any, name: str, text: str) -> None:
    dt = page.evaluate_handle(
        """([name, text]) => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], name, { type: 'application/json' }));
        return dt;
    }""",
        [name, text],
    )
    page.dispatch_event(".drop-zone", "dragover", {"dataTransfer": dt})
    assert "over" in page.get_attribute(".drop-zone", "class")
    page.dispatch_event(".drop-zone", "drop", {"dataTransfer": dt})


def test_export_then_import_into_a_fresh_profile(app: AppPage, fresh: Any, site: str, tmp_path: Path) -> None:
    app.py(SEED.replace("DB", repr(app.db)))
    path = export(app, tmp_path, "export-all")
    assert path.name.startswith("chatmem-all-") and path.suffix == ".json"
    data = json.loads(path.read_text())
    assert len(data["sessions"]) == 3 and data["version"]
    assert "api_key" not in path.read_text() and "apiKey" not in path.read_text()
    want = app.py(SNAPSHOT.replace("DB", repr(app.db)))

    # a fresh profile: nothing there; import by the file picker
    page = fresh.new_page()
    page.set_default_timeout(60_000)
    b = AppPage(page, site, unique_name("fresh"))
    assert b.titles() == []
    page.click(".tools [data-panel=data]")
    page.set_input_files("#import-file", str(path))
    page.wait_for_selector("#import-summary")
    report = page.locator("#import-summary").inner_text()
    assert "chatmem format" in report and "3 conversations, 4 messages" in report
    b.expect_titles(["Lisbon trip", "Chess", "Bread"])
    # the status line counts what arrived, once semantic search holds it
    page.wait_for_selector("#work-status .text:has-text('semantic search ready for 4 messages')")
    assert b.py(SNAPSHOT.replace("DB", repr(b.db))) == want
    # the imported conversation opens with its messages
    page.click("#session-list .session:has-text('Lisbon trip')")
    page.wait_for_selector("#messages .msg.assistant:has-text('Alfama is charming')")

    # another fresh database in that profile: import by drag and drop, as a backup (ids kept)
    c = AppPage(fresh.new_page(), site, unique_name("drop"))
    c.page.click(".tools [data-panel=data]")
    c.page.check("#import-restore")
    drop_file(c.page, path.name, path.read_text())
    c.page.wait_for_selector("#import-summary")
    assert "3 conversations, 4 messages" in c.page.locator("#import-summary").inner_text()
    assert c.py(SNAPSHOT.replace("DB", repr(c.db))) == want
    ids = """
import chatmem
mem = await chatmem.open(DB)
sorted(s.session_id for s in await mem.sessions.list(archived=None))"""
    assert c.py(ids.replace("DB", repr(c.db))) == sorted(s["meta"]["sessionId"] for s in data["sessions"])
    # the same backup again changes nothing
    drop_file(c.page, path.name, path.read_text())
    c.page.wait_for_selector("#import-summary:has-text('3 conversations already here, unchanged')")
    c.expect_titles(["Lisbon trip", "Chess", "Bread"])
    assert not b.errors and not c.errors, (b.errors, c.errors)


def test_export_chosen_conversations_only(app: AppPage, tmp_path: Path) -> None:
    app.py(SEED.replace("DB", repr(app.db)))
    p = app.page
    p.click(".tools [data-panel=data]")
    p.wait_for_selector(".export-pick")
    for box in p.locator(".export-pick").all():
        box.uncheck()
    p.locator("li:has-text('Bread') .export-pick").check()
    p.locator("li:has-text('Chess') .export-pick").check()
    with p.expect_download() as dl:
        p.click("[data-action=export-selected]")
    data = json.loads(Path(dl.value.path()).read_text())
    assert sorted(s["meta"]["title"] for s in data["sessions"]) == ["Bread", "Chess"]


def test_a_file_that_is_not_an_export_is_refused_clearly(app: AppPage) -> None:
    p = app.page
    app.send("Already here")
    p.click(".tools [data-panel=data]")
    drop_file(p, "notes.json", json.dumps({"hello": "world"}))
    err = p.locator("#import-report .status-err")
    err.wait_for()
    assert "Nothing imported" in err.inner_text() and "notes.json" in err.inner_text()
    assert "not in a format chatmem can read" in err.inner_text()
    # one sentence that names what it reads: no Python list, no field names
    assert "ChatGPT" in err.inner_text() and "[" not in err.inner_text()
    # a broken file: also nothing written
    p.set_input_files(
        "#import-file",
        {
            "name": "broken.json",
            "mimeType": "application/json",
            "buffer": b'{"version": "1.0.0", "sessions": [{"meta": {}, "messages": [{"role": 7}]}]}',
        },
    )
    p.wait_for_selector("#import-report:has-text('broken.json')")
    assert "Nothing imported" in p.locator("#import-report").inner_text()
    assert app.titles() == ["Already here"]
    assert (
        app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
len(await mem.sessions.list(archived=None))""")
        == 1
    )


def test_a_chatgpt_export_keeps_traces_of_what_it_could_not_bring(app: AppPage) -> None:
    """An image the export holds only a pointer to is shown as a placeholder, citation markers
    read as references, and the report counts with the right plural. The same file again
    copies nothing: the report says the conversation is already here."""
    p = app.page
    conv = {
        "title": "Trip",
        "conversation_id": "6a1f-trip",
        "create_time": 1_700_000_000.0,
        "current_node": "b",
        "mapping": {
            "r": {"id": "r", "message": None, "parent": None, "children": ["a"]},
            "a": {
                "id": "a",
                "parent": "r",
                "children": ["b"],
                "message": {
                    "id": "a",
                    "author": {"role": "user"},
                    "create_time": 1_700_000_000.0,
                    "content": {
                        "content_type": "multimodal_text",
                        "parts": [
                            {
                                "content_type": "image_asset_pointer",
                                "asset_pointer": "file-service://file-XYZ",
                                "width": 512,
                                "height": 512,
                            },
                            "What city is this?",
                        ],
                    },
                },
            },
            "b": {
                "id": "b",
                "parent": "a",
                "children": [],
                "message": {
                    "id": "b",
                    "author": {"role": "assistant"},
                    "create_time": 1_700_000_001.0,
                    "content": {"content_type": "text", "parts": ["It looks like Porto【13†source】."]},
                },
            },
        },
    }
    p.click(".tools [data-panel=data]")
    drop_file(p, "conversations.json", json.dumps([conv]))
    p.wait_for_selector("#import-summary")
    assert "1 conversation, 2 messages" in p.locator("#import-summary").inner_text()
    p.click("#session-list .session:has-text('Trip')")
    p.wait_for_selector("#messages .attachment")
    assert "Image" in p.locator("#messages .attachment").inner_text()
    assert "It looks like Porto[13]." in p.locator("#messages .msg.assistant").inner_text()
    p.evaluate("document.querySelector('#import-summary').remove()")
    drop_file(p, "conversations.json", json.dumps([conv]))
    p.wait_for_selector("#import-summary:has-text('1 conversation already here, unchanged')")
    assert "message" not in p.locator("#import-summary").inner_text()
    assert p.locator("#session-list .session:has-text('Trip')").count() == 1
