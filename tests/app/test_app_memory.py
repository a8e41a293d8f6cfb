"""The Memory view in real Chromium: the companion learns a name and a move from what the
user writes (in the background, offline), shows where each was said and the history,
forgets what the user asks it to, answers from it, and keeps learnt facts for approval
when review is on."""

from __future__ import annotations

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
