"""The panels over the library, through the interface: search filters and
modes, the context window, insights from SQL, the retention schedule, and
the "reload" notice when another tab upgrades the database."""

from __future__ import annotations

import time

from app.conftest import AppPage

DAY = 86_400_000


def search(app: AppPage, query: str) -> list[str]:
    p = app.page
    p.fill("#search-input", query)
    p.press("#search-input", "Enter")
    p.wait_for_selector(f"#search-results .head:has-text('{query}')")
    return p.locator("#search-results .hit .snip").all_inner_texts()


def test_search_filters_and_modes(app: AppPage) -> None:
    p = app.page
    now = int(time.time() * 1000)
    app.py(f"""
import chatmem, chatmem_app
mem = await chatmem.open({app.db!r})
a = await mem.sessions.create(title="Garden", character_id="airi")
await mem.messages.append(a.session_id, "user", "Tomatoes need full sun", created_at={now - 10 * DAY})
await mem.messages.append(a.session_id, "assistant", "Water the tomatoes in the morning", created_at={now - 10 * DAY})
b = await mem.sessions.create(title="Kitchen", character_id="chef")
await mem.messages.append(b.session_id, "user", "A sauce of roasted tomatoes", created_at={now})
c = await mem.sessions.create(title="Old garden", character_id="airi")
await mem.messages.append(c.session_id, "user", "Tomato blight last year", created_at={now - 2 * DAY})
await mem.sessions.archive(c.session_id)
await chatmem_app.app.refresh_sessions()
await chatmem_app.app.open_session(b.session_id)
""")
    assert len(search(app, "tomatoes")) == 4  # keyword matches word forms: the archived "tomato" too
    p.click("#search-form summary")
    # the character filter lists the characters in use; chef keeps only the kitchen
    assert p.locator("#search-character option").all_inner_texts() == ["any", "airi", "chef"]
    p.select_option("#search-character", "chef")
    p.wait_for_function("() => document.querySelectorAll('#search-results .hit').length === 1")
    assert "roasted" in p.locator("#search-results .hit").inner_text()
    p.select_option("#search-character", "")
    # a date range: only the last week (the kitchen's sauce and, by its stem, the archived blight)
    week_ago = time.strftime("%Y-%m-%d", time.localtime((now - 7 * DAY) / 1000))
    p.fill("#search-from", week_ago)
    p.press("#search-input", "Enter")
    p.wait_for_function("() => document.querySelectorAll('#search-results .hit').length === 2")
    p.fill("#search-from", "")
    # semantic mode finds the near-miss "tomato" too; without the archived ones it does not
    p.select_option("#search-mode", "semantic")
    p.press("#search-input", "Enter")
    p.wait_for_selector("#search-results:has-text('Semantic search')")
    snips = p.locator("#search-results .hit").all_inner_texts()
    assert any("blight" in s for s in snips) and any("archived" in s for s in snips)
    p.uncheck("#search-archived")
    p.press("#search-input", "Enter")
    p.wait_for_function(
        "() => ![...document.querySelectorAll('#search-results .hit')].some(h => h.innerText.includes('blight'))"
    )
    p.select_option("#search-mode", "hybrid")
    p.press("#search-input", "Enter")
    p.wait_for_selector("#search-results:has-text('Hybrid search')")
    assert p.locator("#search-results .hit").count() >= 3
    # this conversation only
    p.check("#search-this")
    p.press("#search-input", "Enter")
    p.wait_for_function("() => document.querySelectorAll('#search-results .hit').length === 1")
    assert p.locator("#search-results .hit .where").inner_text().startswith("Kitchen")


def test_search_marks_only_matched_words_and_folds_weak_matches(app: AppPage) -> None:
    """Semantic search for "which city do I reside in": no "do", "I", "in" or letter inside
    a word is marked; unrelated messages are not listed as results but folded under
    "weaker matches"; keyword search marks the word forms the index matched."""
    p = app.page
    app.py(f"""
import chatmem, chatmem_app
mem = await chatmem.open({app.db!r})
s = await mem.sessions.create(title="About me")
for text in ["I live in Porto these days, in a small flat", "Do you know a joke about atoms?",
             "Lunch was pasta with tomatoes", "I think jazz is lovely in winter", "Ping me in an hour"]:
    await mem.messages.append(s.session_id, "user", text)
await chatmem_app.app.refresh_sessions()
""")
    p.click("#search-form summary")
    p.select_option("#search-mode", "semantic")
    search(app, "which city do I reside in")
    marks = p.locator("#search-results mark").all_inner_texts()
    assert set(marks) <= {"city", "reside"}, marks
    summary = p.locator("#search-results details.weaker summary")
    assert summary.count() == 1 and "weaker match" in summary.inner_text()
    listed = p.locator("#search-results > ul .hit").count()
    folded = p.locator("#search-results details.weaker .hit").count()
    assert folded >= 1 and listed + folded == 5
    p.select_option("#search-mode", "keyword")
    search(app, "atom jokes")
    assert p.locator("#search-results mark").all_inner_texts() == ["joke", "atoms"]


def test_context_panel_shows_the_window_against_the_budget(app: AppPage) -> None:
    p = app.page
    app.py(f"""
import chatmem, chatmem_app
mem = await chatmem.open({app.db!r})
s = await mem.sessions.create(title="Long talk")
await mem.messages.append_many(s.session_id, [
    {{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {{i}} " + "words " * 300}} for i in range(40)])
app = chatmem_app.app
app.mem.modules.set("module:weather", {{"city": "Lisbon", "sky": "clear"}})
await app.refresh_sessions()
await app.open_session(s.session_id)
""")
    # a small budget: the window keeps the newest messages and says what it left out
    p.click(".tools [data-panel=settings]")
    p.select_option("#set-budget", "local-4k")
    p.fill("#set-recent", "40")
    p.click("#settings-form button[type=submit]")
    p.wait_for_selector("#settings-saved:has-text('Saved')")
    p.click(".tools [data-panel=context]")
    p.wait_for_selector("#ctx-tokens")
    live = p.locator("#ctx-live").text_content()
    assert "module:weather" in live and "Lisbon" in live and "module:datetime" in live
    sent = p.locator("#ctx-tokens").inner_text()
    tokens = int(sent.split()[0].replace(",", ""))
    assert 0 < tokens <= 4096 - 512
    assert "local-4k: 3,584 tokens" in p.locator("#panel-body").inner_text()
    assert "older messages" in p.locator("#ctx-dropped").inner_text()
    parts = p.locator("#ctx-parts").inner_text()
    assert "system" in parts and "context" in parts and "recent" in parts
    # the same window the library builds
    want = app.py("""
import chatmem_app
app = chatmem_app.app
w = await app.mem.build_window(app.current, system_prompt=app.settings["provider"]["system_prompt"], budget="local-4k",
                               retrieval=__import__("chatmem_app.settings").settings.retrieval_config(app.settings))
[w.tokens, len(w.messages), w.dropped_count]""")
    assert sent == f"{want[0]:,} tokens in {want[1]} messages"
    assert p.locator("#panel .ctx-list li").count() >= want[1]
    assert p.get_attribute("#panel [role=meter]", "aria-valuenow") == str(want[0])


def test_insights_count_with_sql(app: AppPage) -> None:
    p = app.page
    app.py(f"""
import chatmem, chatmem_app, time
mem = await chatmem.open({app.db!r})
now = int(time.time() * 1000)
a = await mem.sessions.create(title="A", character_id="airi")
await mem.messages.append_many(a.session_id, [{{"role": "user", "content": "abcd" * 10}} for _ in range(3)])
b = await mem.sessions.create(title="B", character_id="coach")
await mem.messages.append(b.session_id, "user", "x", created_at=now - 3 * 86_400_000)
await chatmem_app.app.refresh_sessions()
""")
    p.click(".tools [data-panel=insights]")
    p.wait_for_selector("#insights-characters")
    rows = p.locator("#insights-characters li").all_text_contents()
    assert "airi" in rows[0] and "3 messages" in rows[0] and "30 tokens" in rows[0]
    assert p.get_attribute("#insights-characters li >> nth=0", "title") == "1 conversation"
    assert "coach" in rows[1] and "1 messages" in rows[1]
    bars = p.evaluate("""() => [...document.querySelectorAll('#panel svg.chart')][0]
        .querySelectorAll('rect').length""")
    assert bars == 14
    per_day = p.evaluate("""() => [...[...document.querySelectorAll('#panel svg.chart')][0]
        .querySelectorAll('rect title')].map(t => +t.textContent.split(': ')[1])""")
    assert per_day[-1] == 3 and per_day[-4] == 1 and sum(per_day) == 4


def test_retention_schedule_turns_on_and_off(app: AppPage) -> None:
    p = app.page
    app.py(f"""
import chatmem, time, chatmem_app
mem = await chatmem.open({app.db!r})
old = int(time.time() * 1000) - 45 * 86_400_000
await mem.sessions.create(title="Forgotten chat", created_at=old)
await mem.sessions.create(title="Fresh chat")
await chatmem_app.app.refresh_sessions()
""")
    app.expect_titles(["Fresh chat", "Forgotten chat"])
    p.click(".tools [data-panel=settings]")
    assert "off" in p.locator("#retention-schedule").inner_text()
    p.check("#set-retention-auto")
    p.wait_for_selector("#retention-schedule:has-text('is on')")
    # the schedule applied the policy at once, and the list shows it
    app.expect_titles(["Fresh chat"])
    state = """
import chatmem_app
app = chatmem_app.app
[app.mem.retention.scheduled, app.settings["retention"]["auto"]]"""
    assert app.py(state) == [True, True]
    # it survives a reload (saved), and the toggle turns it off
    p.reload()
    app.ready()
    assert app.py(state) == [True, True]
    p.click(".tools [data-panel=settings]")
    p.uncheck("#set-retention-auto")
    p.wait_for_selector("#retention-schedule:has-text('is off')")
    assert app.py(state) == [False, False]


def test_reload_notice_when_another_tab_upgrades_the_database(app: AppPage, new_page) -> None:  # type: ignore[no-untyped-def]
    p = app.page
    app.send("Before the upgrade")
    assert p.locator("#reload-notice").count() == 0
    other = new_page()
    version = other.page.evaluate(
        """async db => {
        const { SCHEMA_VERSION } = window.chatmem.bridge;
        return await new Promise((resolve, reject) => {
            const req = indexedDB.open(db, SCHEMA_VERSION + 1);
            req.onsuccess = () => { const v = req.result.version; req.result.close(); resolve(v); };
            req.onerror = () => reject(req.error);
            req.onblocked = () => reject(new Error('blocked'));
        });
    }""",
        app.db,
    )
    assert version >= 2
    notice = p.locator("#reload-notice")
    notice.wait_for()
    assert notice.get_attribute("role") == "alert"
    assert "updated in another tab" in notice.inner_text() and "Reload" in notice.inner_text()
    assert p.evaluate("document.activeElement.dataset.action") == "reload-page"
    assert p.locator("#composer-input").is_disabled() and p.locator("#send-btn").is_disabled()
