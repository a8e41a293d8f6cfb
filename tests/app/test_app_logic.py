"""The app's pure parts on CPython: the safe Markdown renderer, search
highlighting, settings validation and what they map to, the chart builder.
(The offline responder is the library's: tests/unit/test_offline.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from chatmem_app import chart, render, settings

import chatmem
from chatmem.index.matches import matched_spans


def tags(nodes: list[Any]) -> list[str]:
    out: list[str] = []
    for n in nodes:
        if isinstance(n, tuple):
            out.append(n[0])
            out += tags(n[2])
    return out


def texts(nodes: list[Any]) -> str:
    return "".join(n if isinstance(n, str) else texts(n[2]) for n in nodes)


@pytest.mark.parametrize(
    "src",
    [
        "<img src=x onerror=alert(1)>",
        "<script>alert(1)</script>",
        "**<b>bold</b>** and `<i>`",
        "[click](javascript:alert(1))",
        "> <iframe src=//evil>",
    ],
)
def test_markup_in_content_stays_text(src: str) -> None:
    nodes = render.markdown(src)
    assert set(tags(nodes)) <= {"p", "strong", "em", "code", "blockquote", "a", "pre"}
    assert "img" not in tags(nodes) and "script" not in tags(nodes) and "iframe" not in tags(nodes)
    # every character of the input survives as text (markers aside)
    for piece in ("<img", "<script>", "<b>", "<i>", "javascript:alert(1)", "<iframe"):
        if piece in src:
            assert piece in texts(nodes)


def test_markdown_blocks_and_inline() -> None:
    nodes = render.markdown(
        "# Title\n\nSome **bold** and *it* and `x<y`\n\n- a\n- b\n\n```py\nprint(1)\n```\n1. one"
    )
    assert [n[0] for n in nodes] == ["h3", "p", "ul", "pre", "ol"]
    assert tags([nodes[1]]) == ["p", "strong", "em", "code"]
    assert texts([nodes[3]]) == "print(1)"


def test_links_only_http_with_safe_rel() -> None:
    (p,) = render.markdown("see [docs](https://example.com/a) and [x](ftp://h/)")
    links = [n for n in p[2] if isinstance(n, tuple) and n[0] == "a"]
    assert len(links) == 1
    assert links[0][1]["href"] == "https://example.com/a"
    assert "noopener" in links[0][1]["rel"]


def test_snippet_marks_the_matched_words_around_the_first() -> None:
    """The window opens before the first match, marks every matched word in it, and says
    where it was cut."""
    text = "x " * 200 + "the needle here, a needle" + " y" * 200
    text = " ".join(text.split())
    nodes = render.snippet(text, matched_spans(text, "needles"), width=60)
    assert [n[2][0] for n in nodes if isinstance(n, tuple)] == ["needle", "needle"]
    shown = texts(nodes)
    assert shown.startswith("…") and shown.endswith("…") and len(shown) <= 62
    assert texts(render.snippet("short text", [], width=60)) == "short text"


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"provider": {"base_url": "ftp://x"}}, "Provider base URL"),
        ({"provider": {"base_url": "http://example.com/v1", "model": "m"}}, "plain http"),
        ({"provider": {"base_url": "https://api.example.com/v1"}}, "Model"),
        ({"retrieval": {"strategy": "random"}}, "Retrieval strategy"),
        ({"retrieval": {"scope": "everyone"}}, "Recall from"),
        ({"retrieval": {"weights": {"recency": 2}}}, "Recency weight"),
        ({"retention": {"max_sessions": -1}}, "max sessions"),
        ({"sync": {"enabled": True}}, "Sync"),
        ({"sync": {"interval_s": 1}}, "Sync interval"),
        ({"budget": "huge"}, "Token budget"),
        ({"retrieval": {"recent_count": 0}}, "Recent messages"),
    ],
)
def test_settings_validation_names_the_field(change: dict[str, Any], problem: str) -> None:
    s = settings.merge(settings.DEFAULTS, change)
    errs = settings.validate(s)
    assert any(problem in e for e in errs), errs


def test_settings_defaults_valid_and_merge_drops_unknown() -> None:
    assert settings.validate(settings.DEFAULTS) == []
    s = settings.merge(settings.DEFAULTS, {"nope": 1, "provider": {"model": "m", "junk": 2}})
    assert "nope" not in s and "junk" not in s["provider"] and s["provider"]["model"] == "m"
    assert s["retrieval"]["weights"] == settings.DEFAULTS["retrieval"]["weights"]
    assert not settings.provider_configured(s)


def test_a_result_marks_only_the_words_that_matched() -> None:
    """Stems of the query's words, whole words only; never stopwords or single letters, never
    a query word inside another word."""
    text = "I live in Porto; which city do I reside in? I'm pinging the zebras in Elm Street"
    nodes = render.snippet(
        text, matched_spans(text, 'which city do I reside in "elm street" zebra'), width=200
    )
    assert [n[2][0] for n in nodes if isinstance(n, tuple)] == ["city", "reside", "zebras", "Elm", "Street"]
    assert texts(nodes) == text


def test_settings_map_to_the_library_objects() -> None:
    s = settings.merge(
        settings.DEFAULTS,
        {
            "retrieval": {
                "strategy": "hybrid",
                "recent_count": 4,
                "weights": {"recency": 0.2, "relevance": 0.8},
            },
            "retention": {
                "max_sessions": 5,
                "archive_after_days": 2,
                "max_age_days": 3,
                "delete_archived": True,
            },
            "sync": {
                "enabled": True,
                "endpoint": "http://127.0.0.1:9/",
                "api_key": "k",
                "interval_s": 30,
                "auto": False,
            },
        },
    )
    assert settings.validate(s) == []
    r = settings.retrieval_config(s)
    assert (r.strategy, r.recent_count, r.hybrid_weights.recency, r.hybrid_weights.relevance) == (
        "hybrid",
        4,
        0.2,
        0.8,
    )
    assert r.scope == "character"  # the default: a new chat recalls the character's other conversations
    r.validate()
    pol = settings.retention_policy(s["retention"])
    assert pol == chatmem.RetentionPolicy(
        max_sessions=5, max_age=3 * 86_400_000, archive_after=2 * 86_400_000, delete_archived=True
    )
    cfg = settings.sync_config(s)
    assert (cfg.endpoint, cfg.api_key, cfg.sync_interval, cfg.auto_sync) == (
        "http://127.0.0.1:9",
        "k",
        30_000,
        False,
    )
    assert isinstance(settings.chat_provider(object(), s), chatmem.OfflineResponder)
    s["provider"].update(base_url="http://127.0.0.1:9/v1", model="m")
    assert isinstance(settings.chat_provider(object(), s), chatmem.OpenAICompatibleProvider)
    # what the library refuses is named too
    bad = settings.merge(s, {"sync": {"api_key": "has space"}})
    assert any(e.startswith("Sync") and "api_key" in e for e in settings.validate(bad))


def test_bar_chart_scales_to_the_largest_value() -> None:
    svg = chart.bar_chart([("1", 2), ("2", 4), ("3", 0)], width=130, height=100)
    assert svg[0] == "svg"
    rects = [n for n in svg[2] if n[0] == "rect"]
    heights = [float(r[1]["height"]) for r in rects]
    assert heights[1] == 100 - 18 - 8 and heights[0] == heights[1] / 2 and heights[2] == 0
    assert chart.per_day([{"day": 10, "messages": 3, "tokens": 9}], today=11, days=3) == [
        (9, 0, 0),
        (10, 3, 9),
        (11, 0, 0),
    ]


def test_relevance_threshold_default_is_the_originals() -> None:
    """0.7, the original's relevanceThreshold and the library's default (calibrated per embedder)."""
    assert settings.DEFAULTS["retrieval"]["relevance_threshold"] == 0.7
    assert (
        settings.retrieval_config(settings.DEFAULTS).relevance_threshold
        == chatmem.RetrievalConfig().relevance_threshold
    )


async def test_settings_saved_with_the_uncalibrated_default_move_to_the_new_one() -> None:

    mem = await chatmem.open("settings-threshold")
    old = settings.merge(settings.DEFAULTS, {"budget": "gpt-4o"})
    old["retrieval"] = {k: v for k, v in old["retrieval"].items() if k != "calibrated"}
    old["retrieval"]["relevance_threshold"] = 0.3  # saved by an earlier version
    await mem.store.kv_set(settings.KEY, {k: v for k, v in old.items() if k != "sync"})
    moved = (await settings.load(mem))["retrieval"]["relevance_threshold"]
    chosen = settings.merge(settings.DEFAULTS, {"retrieval": {"relevance_threshold": 0.3}})
    await settings.save(mem, chosen)  # chosen now, on the calibrated scale: kept
    kept = (await settings.load(mem))["retrieval"]["relevance_threshold"]
    other = dict(old, retrieval=dict(old["retrieval"], relevance_threshold=0.5))
    await mem.store.kv_set(settings.KEY, {k: v for k, v in other.items() if k != "sync"})
    own = (await settings.load(mem))["retrieval"]["relevance_threshold"]
    await mem.close()
    result = moved, kept, own
    assert result == (0.7, 0.3, 0.5)
