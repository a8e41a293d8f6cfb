"""The app through its interface, in real Chromium: sessions, messages, the
offline responder, pin/tag/archive/rename/fork/delete, search, XSS."""

from __future__ import annotations

import re

from app.conftest import AppPage


def test_send_with_offline_responder_and_composer_keys(app: AppPage) -> None:
    p = app.page
    assert p.locator("#messages .welcome").is_visible()
    p.click("#new-session")
    p.wait_for_function("() => document.activeElement.id === 'composer-input'")
    # Shift+Enter is a new line, Enter sends
    p.type("#composer-input", "Planning a trip to Lisbon")
    p.keyboard.press("Shift+Enter")
    p.keyboard.type("with my sister in May")
    assert p.input_value("#composer-input") == "Planning a trip to Lisbon\nwith my sister in May"
    assert p.locator("#messages .msg").count() == 0
    p.keyboard.press("Enter")
    p.wait_for_selector("#messages .msg.assistant.offline")
    assert p.input_value("#composer-input") == ""
    user = p.locator("#messages .msg.user")
    assert user.count() == 1 and "with my sister in May" in user.inner_text()
    assert user.locator("time").get_attribute("datetime")
    reply = p.locator("#messages .msg.assistant").first
    assert "Offline — answering from memory" in reply.inner_text()
    assert "offline — from memory" in reply.locator(".badge").inner_text()
    # the session took its title from the first message
    assert app.titles() == ["Planning a trip to Lisbon with my sister in May"]
    # a second conversation: the responder quotes the first one
    app.new_session()
    app.send("What do you remember about Lisbon?")
    last = p.locator("#messages .msg.assistant").last.inner_text()
    assert "Offline — answering from memory" in last
    assert "Planning a trip to Lisbon" in last and "“lisbon”" in last
    # both replies are stored as offline replies, the user messages before them
    stored = app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
out = []
for s in await mem.sessions.list():
    out += [(m.role, m.provider, m.model) for m in await mem.messages.list(s.session_id)]
out""")
    assert sorted(map(tuple, stored)) == sorted(
        [("user", None, None), ("assistant", "offline", "offline-memory")] * 2
    )
    # sync was never turned on: nothing is queued for it, and the sync panel says so truthfully
    p.click("#sync-chip")
    assert p.locator("#sync-state").inner_text() == "Sync off"
    assert int(p.locator("#sync-pending").inner_text().split()[0]) == 0
    assert "Sync is off" in p.locator("#panel-body").inner_text()
    assert p.locator("#panel [data-action=sync-now]").is_disabled()


def test_pin_tag_rename_archive(app: AppPage) -> None:
    p = app.page
    for text in ("First chat about gardening", "Second chat about bread", "Third chat about chess"):
        app.new_session()
        app.send(text)
    assert app.titles() == ["Third chat about chess", "Second chat about bread", "First chat about gardening"]
    # pin the oldest: it goes on top, under "Pinned"
    p.click("#session-list .session:has-text('gardening')")
    p.click("#session-bar [data-action=pin]")
    p.wait_for_selector("#session-list .group-label:has-text('Pinned')")
    assert app.titles()[0] == "First chat about gardening"
    p.wait_for_selector("#session-bar [data-action=pin]:text-is('Unpin')")
    # tag it, filter by the tag
    p.fill("#tag-input", "hobby")
    p.press("#tag-input", "Enter")
    p.wait_for_selector("#session-bar .tag:has-text('hobby')")
    p.select_option("#tag-filter", "hobby")
    p.wait_for_function("() => document.querySelectorAll('#session-list .session').length === 1")
    assert app.titles() == ["First chat about gardening"]
    p.select_option("#tag-filter", "")
    p.wait_for_function("() => document.querySelectorAll('#session-list .session').length === 3")
    # rename inline: Escape cancels, Enter saves
    p.click("#session-bar [data-action=rename]")
    p.fill("#rename-input", "Not this")
    p.press("#rename-input", "Escape")
    assert p.locator("#conv-title").inner_text() == "First chat about gardening"
    p.click("#session-bar [data-action=rename]")
    p.fill("#rename-input", "Garden plans")
    p.press("#rename-input", "Enter")
    p.wait_for_selector("#conv-title:has-text('Garden plans')")
    assert app.titles()[0] == "Garden plans"
    # archive another one: it leaves the active list and shows under Archived
    p.click("#session-list .session:has-text('bread')")
    p.click("#session-bar [data-action=archive]")
    p.wait_for_function("() => document.querySelectorAll('#session-list .session').length === 2")
    assert "Second chat about bread" not in app.titles()
    p.click("#view-archived")
    app.expect_titles(["Second chat about bread"])
    p.click("#view-active")
    # all of it is stored
    metas = app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
[(s.title, s.pinned, s.archived, s.tags) for s in await mem.sessions.list(archived=None)]""")
    assert ["Garden plans", True, False, ["hobby"]] in metas
    assert ["Second chat about bread", False, True, []] in metas
    # survives a reload
    p.reload()
    app.ready()
    assert app.titles() == ["Garden plans", "Third chat about chess"]


def test_fork_from_a_message(app: AppPage) -> None:
    p = app.page
    app.new_session()
    app.send("Let us write a poem about the sea")
    app.send("Make it rhyme")
    assert p.locator("#messages .msg").count() == 4
    # fork after the first reply (message 2)
    p.locator("#messages .msg").nth(1).hover()
    p.locator("#messages .msg").nth(1).locator("[data-action=fork]").click()
    p.wait_for_selector("#conv-title:has-text('(fork)')")
    assert p.locator("#messages .msg").count() == 2
    assert "Forked from" in p.locator("#session-bar .lineage").inner_text()
    app.send("Make it a haiku instead")
    assert p.locator("#messages .msg").count() == 4
    # the parent is untouched; the lineage button goes back to it
    p.click("#session-bar .lineage button")
    p.wait_for_selector("#conv-title:not(:has-text('(fork)'))")
    assert p.locator("#messages .msg").count() == 4
    assert "Make it rhyme" in p.locator("#messages").inner_text()
    fork = app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
f = [s for s in await mem.sessions.list() if s.parent_id][0]
[f.fork_index, f.message_count]""")
    assert fork == [2, 4]


def test_search_and_jump_to_the_message(app: AppPage) -> None:
    p = app.page
    app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
a = await mem.sessions.create(title="Old notes")
await mem.messages.append_many(a.session_id, [
    {{"role": "user", "content": f"filler message number {{i}}"}} for i in range(60)])
await mem.messages.append(a.session_id, "assistant", "The zebra crossing is on Elm street")
await mem.messages.append_many(a.session_id, [
    {{"role": "user", "content": f"more filler {{i}}"}} for i in range(60)])
b = await mem.sessions.create(title="Other")
await mem.messages.append(b.session_id, "user", "Nothing to see")
""")
    p.reload()
    app.ready()
    p.fill("#search-input", "ZEBRA")
    p.press("#search-input", "Enter")
    p.wait_for_selector("#search-results .hit")
    assert "1 result" in p.locator("#search-results .head").inner_text()
    assert "Keyword (BM25) search" in p.locator("#search-results").inner_text()
    assert p.locator("#search-results mark").inner_text() == "zebra"
    p.click("#search-results .hit")
    target = p.locator("#messages .msg.flash")
    target.wait_for()
    assert "zebra crossing" in target.inner_text()
    assert p.evaluate("document.activeElement.classList.contains('msg')")
    assert p.locator("#conv-title").inner_text() == "Old notes"
    # the message is scrolled into view in a long conversation
    box = target.bounding_box()
    view = p.locator("#conversation").bounding_box()
    assert box and view and view["y"] <= box["y"] <= view["y"] + view["height"]
    # role filter: no user message says zebra
    p.click("#search-form summary")
    p.select_option("#search-role", "user")
    p.press("#search-input", "Enter")
    p.wait_for_selector("#search-results:has-text('Nothing found')")
    p.click("#search-results [data-action=search-clear]")
    p.locator("#session-list").wait_for(state="visible")
    assert p.locator("#search-results").is_hidden()


def test_delete_with_undo(app: AppPage) -> None:
    p = app.page
    for text in ("Keep this one", "Delete me please"):
        app.new_session()
        app.send(text)
    p.click("#session-bar [data-action=delete-session]")
    app.expect_titles(["Keep this one"])
    # the keyboard stays in the list, on the conversation now open; Undo is announced
    p.wait_for_function("() => document.activeElement?.matches('#session-list .session')")
    assert "Keep this one" in p.evaluate("document.activeElement.textContent")
    assert p.get_attribute("#toasts", "aria-live") == "polite"
    assert app.py("import chatmem_app; chatmem_app.app.undo_ms") >= 10_000
    p.click("#toasts [data-action=undo-delete]")
    p.wait_for_function("() => document.querySelectorAll('#session-list .session').length === 2")
    p.wait_for_selector("#conv-title:text-is('Delete me please')")
    # Ctrl+Z from the list brings a deleted conversation back too
    p.click("#session-bar [data-action=delete-session]")
    app.expect_titles(["Keep this one"])
    p.keyboard.press("Control+z")
    app.expect_titles(["Delete me please", "Keep this one"])
    # delete for good: shorten the undo window, wait it out
    app.py("import chatmem_app; chatmem_app.app.undo_ms = 300")
    p.click("#session-bar [data-action=delete-session]")
    p.wait_for_timeout(800)
    left = app.py(f"""
import chatmem
mem = await chatmem.open({app.db!r})
[s.title for s in await mem.sessions.list(archived=None)]""")
    assert left == ["Keep this one"]
    p.reload()
    app.ready()
    assert app.titles() == ["Keep this one"]


def test_markup_in_messages_stays_inert_text(app: AppPage) -> None:
    p = app.page
    evil_img = '<img src=x onerror="window.__pwned=1">'
    evil_script = "<script>window.__pwned=2</script>"
    app.new_session()
    app.send(evil_img)
    app.send(evil_script)
    # stored content from elsewhere (an import, sync): tool calls and titles too
    app.py(f"""
import chatmem, chatmem_app
mem = await chatmem.open({app.db!r})
s = await mem.sessions.create(title={evil_img!r}, tags=["<b>x</b>"])
await mem.messages.append(s.session_id, "assistant", "**bold** <iframe src=javascript:parent.__pwned=3>",
    tool_calls=[{{"id": "c1", "type": "function", "function": {{"name": "<svg onload=alert(1)>",
                  "arguments": "{{\\"q\\": \\"<img src=y onerror=window.__pwned=4>\\"}}"}}}}])
await mem.messages.append(s.session_id, "tool", "<script>window.__pwned=5</script>", tool_call_id="c1")
await chatmem_app.app.refresh_sessions()
await chatmem_app.app.open_session(s.session_id)
""")
    p.wait_for_selector("#messages details.tool-call")
    p.locator("#messages details summary").first.click()
    p.locator("#messages details summary").last.click()
    p.wait_for_timeout(300)
    assert p.evaluate("window.__pwned") is None
    assert p.locator("#messages img, #messages script, #messages iframe, #messages svg").count() == 0
    assert p.locator("#session-list img, #title-wrap img").count() == 0
    text = p.locator("#messages").inner_text()
    assert "<iframe src=javascript:parent.__pwned=3>" in text
    assert "<script>window.__pwned=5</script>" in text
    assert "<img src=y onerror=window.__pwned=4>" in text
    assert p.locator("#messages strong").first.inner_text() == "bold"
    assert evil_img in app.titles()
    # and in the first conversation, the typed markup is shown as typed
    p.click("#session-list .session:has-text('4 messages')")
    p.wait_for_function("() => document.querySelectorAll('#messages .msg.user').length === 2")
    body = p.locator("#messages .msg.user").all_inner_texts()
    assert any(evil_img in b for b in body) and any(evil_script in b for b in body)
    assert p.evaluate("window.__pwned") is None


def test_csp_allows_only_the_site(app: AppPage) -> None:
    p = app.page
    csp = p.get_attribute('meta[http-equiv="Content-Security-Policy"]', "content")
    directives = dict((d.strip().split(" ", 1) + [""])[:2] for d in csp.split(";"))
    assert directives["default-src"] == "'self'"
    assert re.fullmatch(r"'self' 'wasm-unsafe-eval'( 'sha256-[A-Za-z0-9+/=]+')+", directives["script-src"])
    assert "unsafe-inline" not in csp and "unsafe-eval'" not in csp.replace("wasm-unsafe-eval'", "")
    # an inline script added at run time is refused by the policy
    blocked = p.evaluate("""() => new Promise(resolve => {
        document.addEventListener('securitypolicyviolation', e => resolve(e.violatedDirective), {once: true});
        const s = document.createElement('script'); s.textContent = 'window.__inline = 1';
        document.body.append(s);
        setTimeout(() => resolve(null), 2000);
    })""")
    assert blocked and blocked.startswith("script-src")
    assert p.evaluate("window.__inline") is None
