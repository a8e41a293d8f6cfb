"""The Memory view in real Chromium: the companion learns a name and a move from what the
user writes (in the background, offline), shows where each was said and the history,
forgets what the user asks it to, answers from it, and keeps learnt facts for approval
when review is on."""

from __future__ import annotations

import json

from app.conftest import AppPage, shot


def open_memory(app: AppPage) -> None:
    p = app.page
    if p.locator("#panel-title:has-text('What I know about you')").count() == 0:
        p.click(".tools [data-panel=memory]")
    p.wait_for_selector("#panel-title:has-text('What I know about you')")


def refresh_memory(app: AppPage, want: str) -> None:
    """Draw the panel again until it shows ``want`` (learning runs in the background)."""
    p = app.page
    for _ in range(200):
        app.py(
            "import chatmem_app\nawait chatmem_app.app.mem.facts.settled()\nawait chatmem_app.app.render_panel()\nNone"
        )
        if p.locator(f"#panel-body :text('{want}')").count():
            return
    raise AssertionError(f"the Memory view never showed {want!r}")


def test_the_companion_learns_a_name_and_a_move_forgets_and_shows_history(app: AppPage) -> None:
    p = app.page
    app.new_session()
    app.send("Hi! My name is Ana and I live in Lisbon.")
    app.send("Big news: I moved to Porto.")
    app.send("My favourite food is soup and we have a dog named Rex.")
    open_memory(app)
    refresh_memory(app, "Lives in Porto")
    facts = p.locator("#facts").inner_text()
    assert "Is called Ana" in facts and "Has a dog called Rex" in facts and "Lives in Lisbon" not in facts
    home = p.locator(".fact:has-text('Lives in Porto')")
    home.locator("summary").click()
    assert "Lives in Lisbon until" in home.locator(".fact-history").inner_text()
    assert "said in" in home.inner_text()
    shot(p, "memory-view")
    # forget the dog
    p.locator(".fact:has-text('Has a dog called Rex') [data-action=fact-forget]").click()
    p.wait_for_function(
        "() => !document.querySelector('#panel-body').innerText.includes('Has a dog called Rex')"
    )
    # the source opens the conversation at the message
    p.locator(".fact:has-text('Is called Ana') [data-action=fact-source]").click()
    p.wait_for_selector("#messages .msg.user.flash:has-text('My name is Ana')")
    # asked in a new conversation, the offline responder answers from what it learnt
    app.new_session()
    app.send("What's my name?")
    assert "Is called Ana" in p.locator("#messages .msg.assistant").last.inner_text()


def test_review_keeps_learnt_facts_waiting_for_approval(app: AppPage) -> None:
    p = app.page
    open_memory(app)
    p.check("#memory-review")
    p.wait_for_function("() => document.querySelector('#memory-review').checked")
    app.new_session()
    app.send("I'm allergic to peanuts.")
    open_memory(app)
    refresh_memory(app, "Allergic to peanuts")
    assert p.locator("#facts-pending .fact:has-text('Allergic to peanuts')").count() == 1
    assert p.locator("#facts").count() == 0
    p.locator("#facts-pending [data-action=fact-approve]").click()
    p.wait_for_selector("#facts .fact:has-text('Allergic to peanuts')")
    p.reload()
    app.ready()
    open_memory(app)
    assert p.locator("#memory-review").is_checked()


def test_tell_it_something_and_correct_what_it_knows(app: AppPage) -> None:
    """A fact typed in the view is kept; Edit makes a new version, the old one stays in
    its history; an empty sentence is refused in place."""
    p = app.page
    open_memory(app)
    p.fill("#fact-add-text", "Has a piano lesson on Mondays")
    p.click(".fact-add button[type=submit]")
    p.wait_for_selector("#facts .fact:has-text('Has a piano lesson on Mondays')")
    p.locator(".fact:has-text('piano') [data-action=fact-edit]").click()
    p.fill("#fact-edit-text", "")
    p.click(".fact-edit button[type=submit]")
    p.wait_for_selector("#fact-edit-error:not(:empty)")
    p.fill("#fact-edit-text", "Has a piano lesson on Tuesdays")
    p.fill("#fact-edit-value", "piano on Tuesdays")
    p.click(".fact-edit button[type=submit]")
    item = p.locator(".fact:has-text('Has a piano lesson on Tuesdays')")
    item.wait_for()
    item.locator("summary").click()
    assert "Has a piano lesson on Mondays until" in item.locator(".fact-history").inner_text()
    assert p.locator("#facts").inner_text().count("piano") == 2  # the fact, and its history
    p.reload()
    app.ready()
    open_memory(app)
    assert p.locator("#facts .fact-text").all_inner_texts() == ["Has a piano lesson on Tuesdays"]


def _chatgpt(i: int, said: str) -> dict[str, object]:
    t = 1_700_000_000.0 + i * 60
    return {
        "title": f"Chat {i}",
        "conversation_id": f"conv-{i}",
        "create_time": t,
        "current_node": "b",
        "mapping": {
            "r": {"id": "r", "message": None, "parent": None, "children": ["a"]},
            "a": {
                "id": "a",
                "parent": "r",
                "children": ["b"],
                "message": {
                    "id": f"a{i}",
                    "author": {"role": "user"},
                    "create_time": t,
                    "content": {"content_type": "text", "parts": [said]},
                },
            },
            "b": {
                "id": "b",
                "parent": "a",
                "children": [],
                "message": {
                    "id": f"b{i}",
                    "author": {"role": "assistant"},
                    "create_time": t + 1,
                    "content": {"content_type": "text", "parts": ["I live in the cloud, happily."]},
                },
            },
        },
    }


def _import(app: AppPage, name: str, convs: list[dict[str, object]]) -> None:
    p = app.page
    p.click(".tools [data-panel=data]")
    p.wait_for_selector("#import-file")
    p.set_input_files(
        "#import-file",
        {"name": name, "mimeType": "application/json", "buffer": json.dumps(convs).encode()},
    )
    p.wait_for_selector(f"#import-summary:has-text('{name}')")


def test_after_an_import_it_offers_to_learn_with_progress_and_cancel(app: AppPage) -> None:
    """An import is not learnt from by itself: the app offers it. Learning shows its
    progress and ends with what it learnt; a second, larger import is cancelled part way
    and keeps what was read."""
    p = app.page
    convs = [_chatgpt(i, f"Just saying hello, number {i}.") for i in range(8)]
    convs[2] = _chatgpt(2, "My name is Zoe.")
    convs[5] = _chatgpt(5, "I live in Oslo. I can't stand jazz.")
    _import(app, "chatgpt.json", convs)
    assert app.py("import chatmem_app\nlen(await chatmem_app.app.mem.facts.list())") == 0, (
        "an import is not learnt from unasked"
    )
    p.click("[data-action=learn-import]")
    p.wait_for_selector("#learn-import:has-text('Read 8 conversations')")
    assert "3 things learnt" in p.locator("#learn-import").inner_text()
    shot(p, "learn-from-import")
    p.click("#learn-import [data-panel=memory]")
    p.wait_for_selector("#facts .fact:has-text('Lives in Oslo')")
    assert "Is called Zoe" in p.locator("#facts").inner_text()

    many = [_chatgpt(100 + i, f"Note {i}: I love topic{i}.") for i in range(400)]
    _import(app, "more.json", many)
    p.click("[data-action=learn-import]")
    p.wait_for_selector("#learn-progress")
    p.wait_for_function("() => Number(document.querySelector('#learn-progress')?.value) > 0")
    p.click("[data-action=learn-import-cancel]")
    p.wait_for_selector("#learn-import:has-text('Stopped after')")
    text = p.locator("#learn-import").inner_text()
    read = int(text.split("Stopped after ")[1].split(" ")[0])
    assert 0 < read < 400, text
    learnt = app.py("import chatmem_app\nlen(await chatmem_app.app.mem.facts.list(key='likes'))")
    assert read <= learnt <= read + 1, (read, learnt)  # what was read stays learnt
