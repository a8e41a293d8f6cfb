"""``duckdbPrestart()`` (js/bridge.js): DuckDB-Wasm started ahead of need is the engine the
next opening takes, once; the opening after that starts its own."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

# started twice (idempotent: one engine), then two openings: the first takes it
PRESTART_THEN_OPEN = """async () => {
  const b = window.chatmem.bridge;
  b.duckdbPrestart();
  b.duckdbPrestart();
  const first = await b.duckdbOpen(null);
  const second = await b.duckdbOpen(null);
  const out = {
    first: first.openMs, second: second.openMs,
    answer: await first.execute({ sql: "SELECT 40 + 2 AS x" }),
    other: await second.execute({ sql: "SELECT 'own engine' AS y" }),
  };
  await first.close();
  await second.close();
  return out;
}"""


def test_the_first_opening_takes_the_prestarted_engine(new_page) -> None:
    p = new_page()
    # the app's page opens its own index after the first paint: let it finish first, so
    # that the engine started here is not the one its opening takes
    p.page.wait_for_function(
        "() => window.chatmem.timings['index:done'] || window.chatmem.timings['index:failed']"
    )
    got = p.page.evaluate(PRESTART_THEN_OPEN)
    assert "waited" in got["first"] and "instantiate" in got["first"], got
    assert "waited" not in got["second"] and "instantiate" in got["second"], got
    assert got["answer"] == {"columns": ["x"], "cols": [[42]]}, got
    assert got["other"] == {"columns": ["y"], "cols": [["own engine"]]}, got
