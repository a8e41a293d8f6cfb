"""The active session (mem.sessions.active / set_active) is kept per profile in IndexedDB:
it survives a reload, and each database has its own."""

from __future__ import annotations

from typing import Any

from conftest import unique_name


def test_active_session_survives_a_reload(new_page: Any) -> None:
    p = new_page()
    db, other = unique_name("active"), unique_name("active-other")
    sid = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="keep me open")
await mem.sessions.set_active(s.session_id)
await mem.close()
s.session_id
""")
    p.reload()
    got = p.py(f"""
import chatmem
mem = await chatmem.open({db!r})
other = await chatmem.open({other!r})
out = [await mem.sessions.active(), await other.sessions.active()]
await mem.close(); await other.close()
out
""")
    assert got == [sid, None]
