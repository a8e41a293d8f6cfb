"""Facts in the page: learnt in the background from what the user writes, with the
offline extractor, kept in IndexedDB across a reload, and sent in the window."""

from __future__ import annotations

from typing import Any

from conftest import unique_name


def test_facts_are_learnt_in_the_background_and_survive_a_reload(new_page: Any) -> None:
    db = unique_name("facts-bg")
    p = new_page()
    learnt = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
mem.facts.configure(auto=True, debounce=0.05)
s = await mem.sessions.create(title="getting to know you")
await mem.messages.append(s.session_id, "user", "Hi, my name is Ana and I live in Lisbon.")
await mem.messages.append(s.session_id, "assistant", "Nice to meet you! I live in the cloud.")
await mem.messages.append(s.session_id, "user", "Big news: I moved to Porto!")
await mem.facts.settled()
w = await mem.build_window(s.session_id, max_tokens=4000)
[sorted((f.key, f.value) for f in await mem.facts.list()), [f["text"] for f in w.facts], s.session_id]
""")
    facts, sent, sid = learnt
    assert facts == [["home", "Porto"], ["name", "Ana"]]
    assert set(sent) == {"Lives in Porto", "Is called Ana"}
    p.reload()
    after = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
(home,) = await mem.facts.list(key="home")
again = await mem.facts.extract()
[[f.value for f in await mem.facts.history(home.fact_id)], [m.text for m in await mem.facts.sources(home.fact_id)], again.processed]
""")
    assert after == [["Lisbon", "Porto"], ["Big news: I moved to Porto!"], 0]
