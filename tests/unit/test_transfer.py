"""chatmem.transfer: the export format, whole-input validation, and the import adapters.

Real third-party export files are read in place from ``../shared/fixtures/``
(never copied into the repo); the AIRI fixture is our own (tests/fixtures).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatmem.errors import ImportFormatError, ValidationError
from chatmem.records.ids import IdGenerator
from chatmem.records.models import ChatMessage, SessionMeta, estimate_tokens, extract_text
from chatmem.stores.inprocess import MemoryStore
from chatmem.transfer import (
    EXPORT_VERSION,
    FORMATS,
    aiter_export_json,
    assign_new_ids,
    build_export,
    canonical_dumps,
    convert,
    detect_format,
    dumps_export,
    iter_export_json,
    prepare_import,
    validate_export,
)

REPO = Path(__file__).resolve().parents[2]
_SHARED = REPO.parent / "shared" / "fixtures"
SHARED = _SHARED if _SHARED.is_dir() else Path("/work/shared/fixtures")
OWN = REPO / "tests" / "fixtures"

BRANCHING = SHARED / "chatgpt" / "librechat-branching-tree.json"
WEBSEARCH = SHARED / "chatgpt" / "librechat-websearch-tools.json"
MULTIMODAL = SHARED / "chatgpt" / "echomine-multimodal-single-conversation.json"
CLAUDE = SHARED / "claude" / "osteele-bakery-webapi-conversation.json"
AIRI = OWN / "airi-export.json"


def fake_clock() -> int:
    return 1_700_000_000_000


def ids() -> IdGenerator:
    return IdGenerator(fake_clock)


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def roles(msgs: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in msgs]


def texts(msgs: list[dict[str, Any]]) -> list[str]:
    return [extract_text(m["content"]) for m in msgs]


# --------------------------------------------------------------------------- records for export tests


def make_sessions(
    n_sessions: int = 2, n_messages: int = 3
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    out = []
    for s in range(n_sessions):
        sid = f"S{s}"
        meta = SessionMeta(
            session_id=sid,
            title=f"Título {s} ☁️",
            created_at=1000 + s,
            updated_at=2000 + s,
            tags=["a", "ü"],
            parent_id="S0" if s else None,
            fork_index=1 if s else None,
            fork_reason="try again" if s else None,
            pinned=bool(s),
            message_count=n_messages,
        ).to_record()
        msgs = []
        for i in range(n_messages):
            role = ("user", "assistant", "tool")[i % 3]
            content: Any = (
                f"message {i} — 東京"
                if i % 2 == 0
                else [{"type": "text", "text": f"part {i}"}, {"type": "image", "assetPointer": "file://x"}]
            )
            msgs.append(
                ChatMessage(
                    id=f"{sid}-m{i}",
                    session_id=sid,
                    seq=i,
                    role=role,
                    content=content,
                    created_at=3000 + i,
                    provider="openai" if role == "assistant" else None,
                    model="gpt-4o" if role == "assistant" else None,
                    slices=[{"type": "text", "text": "x"}] if role == "assistant" else None,
                    tool_results=[{"id": "c1", "result": "ok"}] if role == "assistant" else None,
                    categorization={"speech": "hi", "reasoning": "r"} if role == "assistant" else None,
                    tool_calls=[
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ]
                    if role == "assistant"
                    else None,
                    tool_call_id="c1" if role == "tool" else None,
                    name="f" if role == "tool" else None,
                    metadata={"k": [1, 2, {"ñ": None}]},
                    token_count=estimate_tokens(extract_text(content)),
                ).to_record()
            )
        out.append((meta, msgs))
    return out


# --------------------------------------------------------------------------- export format


def test_build_export_has_the_original_shape_and_every_field():
    """The export dict is {version, exportedAt, sessions:[{meta, messages}]} with all record keys."""
    sessions = make_sessions()
    data = build_export(sessions, 1234)
    assert list(data) == ["version", "exportedAt", "sessions"]
    assert data["version"] == EXPORT_VERSION == "1.0.0" and data["exportedAt"] == 1234
    assert list(data["sessions"][0]) == ["meta", "messages"]
    assert data["sessions"][1]["meta"] == sessions[1][0]
    assert list(data["sessions"][1]["meta"]) == list(SessionMeta("", "", 0, 0).to_record())
    assert data["sessions"][1]["messages"] == sessions[1][1]
    assert list(data["sessions"][0]["messages"][1]) == list(ChatMessage("", "", 0, "user", "", 0).to_record())


def test_build_export_drops_store_private_fields():
    """A store's nextSeq (and unknown keys) never reach the export."""
    meta, msgs = make_sessions(1, 1)[0]
    data = build_export([(dict(meta, nextSeq=7), msgs)], 1)
    assert "nextSeq" not in data["sessions"][0]["meta"]


def test_iter_export_chunks_join_to_canonical_dumps():
    """The streamed chunks concatenate to canonical_dumps of the dict form, for any chunk size."""
    sessions = make_sessions(3, 7)
    expected = canonical_dumps(build_export(sessions, 42))
    assert json.loads(expected)["sessions"][0]["meta"]["title"] == "Título 0 ☁️"
    assert "☁️" in expected and ", " not in expected.replace("part", "")[:60]
    for size in (1, 50, 10_000, 1 << 20):
        chunks = list(iter_export_json(42, iter(sessions), chunk_size=size))
        assert "".join(chunks) == expected
        if size == 1:
            assert len(chunks) > 3 * 7  # at least one chunk per message
    assert dumps_export(sessions, 42) == expected
    assert "".join(iter_export_json(42, [])) == canonical_dumps(build_export([], 42))


def test_iter_export_consumes_messages_lazily():
    """Messages are read one at a time: a chunk comes out before the message iterator ends."""
    pulled = []

    def gen():
        for i in range(1000):
            pulled.append(i)
            yield ChatMessage(f"m{i}", "S", i, "user", "x" * 100, 1).to_record()

    meta = SessionMeta("S", "t", 1, 1, message_count=1000).to_record()
    it = iter_export_json(1, [(meta, gen())], chunk_size=1024)
    next(it)
    assert 0 < len(pulled) < 100


async def test_async_export_matches_sync_export():
    """aiter_export_json over async iterables yields the same text as the sync iterator."""
    sessions = make_sessions(2, 5)

    async def agen_msgs(msgs):
        for m in msgs:
            yield m

    async def agen_sessions():
        for meta, msgs in sessions:
            yield meta, agen_msgs(msgs)

    async def collect():
        return "".join([c async for c in aiter_export_json(9, agen_sessions(), chunk_size=64)])

    assert (await collect()) == "".join(iter_export_json(9, sessions))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=30), min_size=0, max_size=6), st.integers(1, 200))
def test_chunks_equal_dumps_for_any_text(contents, chunk_size):
    """Property: for any message texts (any Unicode) and chunk size, chunks join to the dumps."""
    meta = SessionMeta("S", "t", 1, 1, message_count=len(contents)).to_record()
    msgs = [ChatMessage(f"m{i}", "S", i, "user", c, 1).to_record() for i, c in enumerate(contents)]
    expected = canonical_dumps(build_export([(meta, msgs)], 5))
    assert "".join(iter_export_json(5, [(meta, msgs)], chunk_size=chunk_size)) == expected
    assert validate_export(expected) == [(meta, msgs)]


# --------------------------------------------------------------------------- round trip


def test_validate_of_export_is_identity():
    """validate_export(build_export(x)) gives back exactly x (records, order, all fields)."""
    sessions = make_sessions(3, 4)
    assert validate_export(build_export(sessions, 1)) == sessions
    assert validate_export(dumps_export(sessions, 1)) == sessions
    assert validate_export(dumps_export(sessions, 1).encode("utf-8")) == sessions


async def test_export_import_export_is_byte_identical_through_a_store():
    """export -> import(preserve_ids) into a store -> export gives the same bytes but exportedAt."""
    sessions = make_sessions(3, 5)
    first = dumps_export(sessions, 111)

    async def roundtrip() -> str:
        store = MemoryStore()
        _, normalized = prepare_import(first, preserve_ids=True)
        for meta, msgs in normalized:
            await store.create_session(meta, msgs)
        recs = sorted(await store.all_sessions(), key=lambda r: r["sessionId"])
        pairs = [(r, await store.list_messages(r["sessionId"], 0, None, False)) for r in recs]
        return dumps_export(pairs, 222)

    second = await roundtrip()
    assert second != first
    assert second == first.replace('"exportedAt":111', '"exportedAt":222')


def test_fresh_ids_keep_fork_links_inside_the_import():
    """preserve_ids=False re-keys sessions and messages; a fork still points at its (new) parent."""
    sessions = make_sessions(2, 2)
    fmt, fresh = prepare_import(build_export(sessions, 1), preserve_ids=False, ids=ids())
    assert fmt == "chatmem"
    (m0, msgs0), (m1, msgs1) = fresh
    assert m0["sessionId"] != "S0" and m1["parentId"] == m0["sessionId"]
    assert {m["sessionId"] for m in msgs1} == {m1["sessionId"]}
    assert not {m["id"] for m in msgs0 + msgs1} & {"S0-m0", "S0-m1", "S1-m0", "S1-m1"}
    assert [m["content"] for m in msgs0] == [m["content"] for m in sessions[0][1]]
    outside = assign_new_ids([(dict(sessions[1][0], parentId="elsewhere"), [])])
    assert outside[0][0]["parentId"] == "elsewhere"


def test_seq_gaps_are_kept_and_missing_optional_fields_are_filled():
    """A stored seq gap survives; missing seq/sessionId/tokenCount/optional keys get their defaults."""
    data = {
        "version": "1.0.0",
        "exportedAt": 1,
        "sessions": [
            {
                "meta": {"sessionId": "S", "title": "t", "createdAt": 1, "updatedAt": 2, "messageCount": 99},
                "messages": [
                    {"id": "a", "role": "user", "content": "hello there", "createdAt": 5, "seq": 0},
                    {"id": "b", "role": "assistant", "content": "hi", "createdAt": 6, "seq": 4},
                    {"id": "c", "role": "user", "content": "again", "createdAt": 7},
                ],
            }
        ],
    }
    [(meta, msgs)] = validate_export(data)
    assert meta["messageCount"] == 3 and meta["tags"] == [] and meta["userId"] == "local"
    assert [m["seq"] for m in msgs] == [0, 4, 5]
    assert msgs[0]["tokenCount"] == estimate_tokens("hello there") and msgs[2]["sessionId"] == "S"
    assert msgs[1]["provider"] is None and "toolCalls" in msgs[1]


# --------------------------------------------------------------------------- validation errors


def big_export(n: int = 1000) -> dict[str, Any]:
    msgs = [
        ChatMessage(f"m{i}", "S1", i, "user" if i % 2 == 0 else "assistant", f"text {i}", i).to_record()
        for i in range(n)
    ]
    s0 = (SessionMeta("S0", "zero", 0, 0).to_record(), [])
    s1 = (SessionMeta("S1", "one", 0, 0, message_count=n).to_record(), msgs)
    s0b = (dict(s0[0], sessionId="S0b"), [])
    return build_export([s0, s0b, s1], 5)


def test_one_bad_role_among_1000_is_named_by_indices_and_field():
    """A bad role in message 617 of session 2 names sessions[2].messages[617].role."""
    data = big_export()
    data["sessions"][2]["messages"][617]["role"] = "robot"
    with pytest.raises(ImportFormatError) as e:
        validate_export(data)
    assert str(e.value).startswith("sessions[2].messages[617].role: must be one of")
    assert "'robot'" in str(e.value)
    assert (e.value.session_index, e.value.message_index, e.value.field) == (2, 617, "role")
    assert isinstance(e.value, ValidationError)


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("content", 42, "sessions[2].messages[3].content: "),
        ("createdAt", -1, "sessions[2].messages[3].createdAt: "),
        ("createdAt", "yesterday", "sessions[2].messages[3].createdAt: "),
        ("toolCalls", "nope", "sessions[2].messages[3].toolCalls: "),
        ("categorization", {"reasoning": "x"}, "sessions[2].messages[3].categorization: "),
        ("tokenCount", -3, "sessions[2].messages[3].tokenCount: "),
        ("seq", 1, "sessions[2].messages[3].seq: must be an integer greater than 2"),
        ("sessionId", "S0", "sessions[2].messages[3].sessionId: must be the session's id"),
        ("id", "m1", "sessions[2].messages[3].id: duplicate message id 'm1'"),
        ("colour", "red", "sessions[2].messages[3].colour: unknown field"),
    ],
)
def test_each_bad_message_field_is_named(key, value, needle):
    """Every kind of bad message value is reported with its path (record key, not Python name)."""
    data = big_export(10)
    data["sessions"][2]["messages"][3][key] = value
    with pytest.raises(ImportFormatError) as e:
        validate_export(data)
    assert str(e.value).startswith(needle), str(e.value)


def test_missing_required_message_field_and_bad_session_fields():
    """A missing role, a bad session title or duplicate session id each name their path."""
    data = big_export(5)
    del data["sessions"][2]["messages"][4]["role"]
    with pytest.raises(ImportFormatError, match=r"^sessions\[2\]\.messages\[4\]\.role: is required"):
        validate_export(data)
    data = big_export(5)
    data["sessions"][1]["meta"]["title"] = 5
    with pytest.raises(ImportFormatError, match=r"^sessions\[1\]\.meta\.title: must be a string"):
        validate_export(data)
    data = big_export(5)
    data["sessions"][1]["meta"]["sessionId"] = "S0"
    with pytest.raises(ImportFormatError, match=r"^sessions\[1\]\.meta\.sessionId: duplicate session id"):
        validate_export(data)
    data = big_export(5)
    data["sessions"][0]["messages"] = {}
    with pytest.raises(ImportFormatError, match=r"^sessions\[0\]\.messages: must be an array"):
        validate_export(data)


def test_wrong_version_is_a_clear_error():
    """An export of another version is refused with the version named, even via convert()."""
    data = big_export(3)
    data["version"] = "2.0.0"
    for call in (validate_export, convert):
        with pytest.raises(ImportFormatError, match=r"^version: unsupported export version '2.0.0'"):
            call(data)
    del data["version"]
    with pytest.raises(ImportFormatError, match="unsupported export version None"):
        convert(data)


def test_malformed_json_is_a_clear_error():
    """Broken JSON text (str or bytes), empty text, NaN and non-UTF-8 bytes raise ImportFormatError."""
    with pytest.raises(ImportFormatError, match=r"malformed JSON at line 1 column \d+"):
        convert('{"version": "1.0.0", "sessions": [')
    with pytest.raises(ImportFormatError, match="malformed JSON at line 2"):
        detect_format(b'[\n  {"mapping": }]')
    with pytest.raises(ImportFormatError, match="empty"):
        convert("   ")
    with pytest.raises(ImportFormatError, match="NaN is not valid JSON"):
        convert('{"version": "1.0.0", "exportedAt": NaN, "sessions": []}')
    with pytest.raises(ImportFormatError, match="not UTF-8"):
        convert(b"\xff\xfe{}")
    with pytest.raises(ImportFormatError, match="must be a dict, a list, or JSON text"):
        convert(3.5)


def test_unknown_format_is_a_clear_error():
    """Input of no known shape, or a named format that does not exist, says what is expected."""
    with pytest.raises(
        ImportFormatError, match=r"not in a format chatmem can read \(it is an object with keys: foo\)"
    ):
        detect_format({"foo": 1})
    with pytest.raises(ImportFormatError) as e:
        convert([{"messages": []}])
    # one sentence naming what it reads, never a Python list
    assert str(e.value).count(". ") == 0 and "ChatGPT" in str(e.value) and "[" not in str(e.value)
    with pytest.raises(ImportFormatError, match="nothing to import"):
        convert([])
    with pytest.raises(ImportFormatError, match=r"unknown import format 'gemini'"):
        convert({"sessions": []}, "gemini")
    with pytest.raises(ImportFormatError, match=r"not in the 'claude' format"):
        convert(load(BRANCHING), "claude")


def test_utf8_bom_bytes_are_accepted():
    """A file saved with a UTF-8 byte-order mark still imports."""
    raw = b"\xef\xbb\xbf" + dumps_export(make_sessions(1, 1), 3).encode("utf-8")
    assert detect_format(raw) == "chatmem" and len(convert(raw)) == 1


# --------------------------------------------------------------------------- detection


def test_every_fixture_is_detected_as_its_format():
    """Auto-detection names each fixture's format, from dict/list, str and bytes alike."""
    expected = {
        BRANCHING: "chatgpt",
        WEBSEARCH: "chatgpt",
        MULTIMODAL: "chatgpt",
        CLAUDE: "claude",
        AIRI: "airi",
    }
    for path, fmt in expected.items():
        raw = path.read_bytes()
        assert detect_format(raw) == detect_format(raw.decode("utf-8")) == detect_format(load(path)) == fmt
    assert detect_format(build_export([], 1)) == "chatmem"
    assert set(FORMATS) == {"chatmem", "airi", "chatgpt", "claude"}


def _check_records(normalized):
    """Every session is a valid, self-consistent set of records (as the store will get them)."""
    for meta, msgs in normalized:
        assert meta["messageCount"] == len(msgs)
        assert [m["seq"] for m in msgs] == list(range(len(msgs)))
        assert all(m["sessionId"] == meta["sessionId"] for m in msgs)
        assert all(m["tokenCount"] == estimate_tokens(extract_text(m["content"])) for m in msgs)
        assert all(isinstance(m["createdAt"], int) for m in msgs)
    ids_ = [m["id"] for _, msgs in normalized for m in msgs]
    assert len(ids_) == len(set(ids_))
    # and they survive our own export/validate unchanged
    assert validate_export(dumps_export(normalized, 1)) == normalized


# --------------------------------------------------------------------------- ChatGPT


def _main_path(conv: dict[str, Any]) -> list[str]:
    path, node = [], conv["current_node"]
    while node is not None:
        path.append(node)
        node = conv["mapping"][node]["parent"]
    return path[::-1]


def test_chatgpt_branching_tree_main_line_and_forks():
    """Main line follows current_node (8 nodes -> 6 visible messages); the edited prompt is a
    labelled fork; the regenerated last reply, word for word the main line's, is no second copy."""
    raw = load(BRANCHING)
    path = _main_path(raw[0])
    assert len(path) == 8
    normalized = convert(BRANCHING.read_bytes(), ids=ids())
    _check_records(normalized)
    assert len(normalized) == 2
    (main, mm), (f1, fm1) = normalized
    assert main["title"] == "Assist user with summary" and main["parentId"] is None
    assert main["forkIndex"] is None
    assert len(mm) == 6 and roles(mm) == ["user", "assistant"] * 3
    assert [m["metadata"]["sourceId"] for m in mm] == path[2:]  # root and hidden system skipped
    assert texts(mm)[:5] == [
        "hi there",
        "Hello! How can I assist you today?",
        "hi again",
        "Hey! Welcome back. What's on your mind?",
        "tell me a joke",
    ]
    # the edited/re-sent prompt after the first reply
    assert (f1["parentId"], f1["forkIndex"], f1["messageCount"]) == (main["sessionId"], 2, 6)
    assert f1["title"] == "Assist user with summary (branch 2)"
    assert texts(fm1)[2:5] == ["so cool bro", "Thanks! What brings you here today?", "tell me a story"]
    assert fm1[5]["metadata"]["status"] == "in_progress"
    assert fm1[5]["metadata"]["finishType"] == "interrupted"
    # shared prefixes are copies: same content, new ids
    assert texts(fm1)[:2] == texts(mm)[:2] and fm1[0]["id"] != mm[0]["id"]
    assert fm1[0]["metadata"]["sourceId"] == mm[0]["metadata"]["sourceId"]
    assert mm[0]["createdAt"] == 1714585031150 and main["createdAt"] == 1714585031149
    assert main["updatedAt"] == 1714585060879
    assert f1["createdAt"] == 1714585034307  # the fork is as old as its first own message
    assert all(
        m["provider"] == "openai" and m["model"] == "text-davinci-002-render-sha"
        for m in mm
        if m["role"] == "assistant"
    )
    assert all(m["provider"] is None for m in mm if m["role"] == "user")
    copies = f1["forkIndex"]
    # 12 messages less the hidden system one and the regenerated reply that repeats the main line's
    assert sum(len(m) for _, m in normalized) - copies == 10


def test_chatgpt_websearch_tools():
    """Two conversations: browsing tool calls, tool results linked by toolCallId, escaped Unicode."""
    normalized = convert(WEBSEARCH.read_text(encoding="ascii"), ids=ids())
    _check_records(normalized)
    assert [(m["title"], m["messageCount"]) for m, _ in normalized] == [
        ("Conversation 1. Web Search", 15),
        ("Conversation 2", 4),
    ]
    msgs = normalized[0][1]
    assert roles(msgs) == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert roles(normalized[1][1]) == ["user", "assistant", "user", "assistant"]
    assert texts(msgs)[0] == "What is the fuel consumption of vw  transporter with 8 people in l/km"
    call = msgs[1]
    assert call["content"] == [
        {
            "type": "code",
            "code": 'search("Volkswagen Transporter fuel consumption with 8 people l/km")',
            "language": "unknown",
        }
    ]
    assert call["toolCalls"][0]["function"]["name"] == "browser" and call["model"] == "gpt-4"
    display = msgs[2]
    assert display["name"] == "browser" and display["toolCallId"] == call["toolCalls"][0]["id"]
    assert display["metadata"]["contentType"] == "tether_browsing_display"
    assert display["content"].startswith("# 【0†Volkswagen Transporter MPG")
    quote = msgs[4]
    assert quote["metadata"]["contentType"] == "tether_quote"
    assert quote["metadata"]["domain"] == "www.ultimatespecs.com"
    assert quote["toolCallId"] == msgs[3]["toolCalls"][0]["id"] == msgs[5]["toolCallId"]
    # citation markers read as plain references to the quoted results
    markers = [re.findall(r"\[\d+\]", t) for t in texts(msgs)]
    assert markers[6] == ["[6]", "[7]"]
    assert markers[12] == markers[14] == ["[13]"]
    assert not any("†source】" in t for t in texts(msgs))
    assert "\\u3010" not in "".join(texts(msgs))  # escapes decoded, not kept as text
    assert sum(m["messageCount"] for m, _ in normalized) == 21 - 2  # two hidden system messages


def test_chatgpt_multimodal_single_object():
    """One conversation object (not an array): hidden context skipped, image part kept, raw UTF-8."""
    normalized = convert(MULTIMODAL.read_bytes(), ids=ids())
    _check_records(normalized)
    [(meta, msgs)] = normalized
    assert meta["title"] == "Interpretación pintura surrealista"
    assert roles(msgs) == ["user", "assistant", "user", "assistant"]  # 7 less system, context, empty
    image, text = msgs[0]["content"]
    assert image["type"] == "image" and image["assetPointer"] == "file-service://file-6y9faxjcnXrzx8UTUQepS7"
    assert image["width"] == 1536
    assert text == {"type": "text", "text": "Interpret this painting "}
    assert texts(msgs)[2] == "Could there also be erotic connotations?"
    assert texts(msgs)[3].startswith("Yes — it’s quite plausible")
    assert msgs[1]["model"] == "gpt-4o" and msgs[1]["provider"] == "openai"
    assert not any("user_profile" in canonical_dumps(m) for m in msgs)
    assert list(iter_export_json(1, normalized))[0].count("Interpretación") == 1  # not \u-escaped


def test_chatgpt_edge_cases_inline():
    """Missing current_node picks the newest leaf; a bad author role names its node; orphans are kept."""

    def node(nid, parent, children, role, text, t):
        return {
            "id": nid,
            "parent": parent,
            "children": children,
            "message": None
            if role is None
            else {
                "id": nid,
                "author": {"role": role, "name": None},
                "create_time": t,
                "content": {"content_type": "text", "parts": [text]},
                "metadata": {},
                "recipient": "all",
            },
        }

    conv = {
        "title": None,
        "create_time": 10.0,
        "update_time": None,
        "mapping": {
            "r": node("r", None, ["a"], None, "", None),
            "a": node("a", "r", ["b1", "b2"], "user", "q", 11.0),
            "b1": node("b1", "a", [], "assistant", "old", 12.0),
            "b2": node("b2", "a", [], "assistant", "new", None),
            "o": node("o", "gone", [], "user", "orphan", 20.0),
        },
    }
    normalized = convert(conv, ids=ids())
    _check_records(normalized)
    assert [texts(m) for _, m in normalized] == [["q", "new"], ["q", "old"], ["orphan"]]
    assert normalized[0][0]["title"] == "Untitled"
    assert normalized[0][1][1]["createdAt"] == 11000  # no create_time: the one before it
    assert [(m["forkIndex"], m["parentId"] == normalized[0][0]["sessionId"]) for m, _ in normalized[1:]] == [
        (1, True),
        (0, True),
    ]
    bad = copy.deepcopy(conv)
    bad["mapping"]["b1"]["message"]["author"]["role"] = "critic"
    with pytest.raises(
        ImportFormatError, match=r"^conversations\[0\]\.mapping\['b1'\]\.message\.author\.role"
    ):
        convert([bad])


# --------------------------------------------------------------------------- Claude


def test_claude_webapi_conversation():
    """claude.ai's API object: 4 messages, text only in content[], image file kept, ISO times to ms."""
    normalized = convert(CLAUDE.read_bytes(), ids=ids())
    _check_records(normalized)
    [(meta, msgs)] = normalized
    assert meta["title"] == "Interactive Bakery Comparison Visualization"
    assert meta["createdAt"] == 1730217558774 and meta["updatedAt"] == 1730217736623
    assert roles(msgs) == ["user", "assistant", "user", "assistant"]
    first = msgs[0]["content"]
    assert first[0]["text"].startswith("Make an interactive visualization of this diagram")
    assert "what’s wrong" in first[0]["text"]
    assert first[1]["type"] == "image" and first[1]["fileUuid"] == "0e0981c2-1224-4b1c-aeab-42529485a35e"
    assert len(first) == 2  # files and files_v2 describe the same image once
    assert texts(msgs)[2] == "What are your ideas for extending this?"
    assert texts(msgs)[1].startswith(" I'll create an interactive visualization")
    assert msgs[0]["createdAt"] == 1730217578340
    assert [(m["provider"], m["model"]) for m in msgs[1::2]] == [
        ("anthropic", "claude-3-5-sonnet-20240620")
    ] * 2
    assert msgs[0]["provider"] is None
    assert msgs[3]["metadata"] == {"source": "claude", "sourceId": "47e6dd5f-0e09-4063-8ab3-f155765ac9a1"}


def test_claude_bulk_export_array_and_branches():
    """A bulk-export array (top-level text, no parents) is read in order; a tree with a leaf gets forks."""
    bulk = [
        {
            "uuid": "c1",
            "name": "",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:01:00Z",
            "account": {"uuid": "x"},
            "chat_messages": [
                {
                    "uuid": "m1",
                    "sender": "human",
                    "text": "¿Qué tal?",
                    "content": [],
                    "created_at": "2024-01-01T00:00:00.500Z",
                    "attachments": [
                        {"file_name": "a.txt", "file_type": "text/plain", "extracted_content": "notes"}
                    ],
                    "files": [],
                },
                {"uuid": "m2", "sender": "assistant", "text": "Bien.", "created_at": "2024-01-01T00:00:01Z"},
                {
                    "uuid": "m3",
                    "sender": "human",
                    "text": "",
                    "content": [],
                    "created_at": "2024-01-01T00:00:02Z",
                },
            ],
        }
    ]
    [(meta, msgs)] = convert(json.dumps(bulk), ids=ids())
    assert meta["title"] == "Untitled" and meta["createdAt"] == 1704067200000
    assert roles(msgs) == ["user", "assistant"]  # the empty message is skipped
    assert msgs[0]["content"][0] == {"type": "text", "text": "¿Qué tal?"}
    assert msgs[0]["content"][1] == {
        "type": "file",
        "name": "a.txt",
        "mimeType": "text/plain",
        "text": "notes",
    }
    assert msgs[1]["content"] == "Bien." and msgs[1]["model"] is None
    tree = {
        "uuid": "c2",
        "name": "T",
        "created_at": "2024-01-01T00:00:00+00:00",
        "updated_at": None,
        "current_leaf_message_uuid": "b2",
        "chat_messages": [
            {
                "uuid": "q",
                "sender": "human",
                "text": "q",
                "parent_message_uuid": "0000",
                "index": 0,
                "created_at": "2024-01-01T00:00:01+00:00",
            },
            {
                "uuid": "b1",
                "sender": "assistant",
                "text": "first",
                "parent_message_uuid": "q",
                "index": 1,
                "created_at": "2024-01-01T00:00:02+00:00",
            },
            {
                "uuid": "b2",
                "sender": "assistant",
                "text": "second",
                "parent_message_uuid": "q",
                "index": 2,
                "created_at": "2024-01-01T00:00:03+00:00",
            },
        ],
    }
    normalized = convert(tree, ids=ids())
    _check_records(normalized)
    assert [texts(m) for _, m in normalized] == [["q", "second"], ["q", "first"]]
    assert normalized[1][0]["forkIndex"] == 1
    with pytest.raises(ImportFormatError, match=r"^conversations\[0\]\.chat_messages\[1\]\.sender"):
        convert([dict(bulk[0], chat_messages=[bulk[0]["chat_messages"][0], {"sender": "bot"}])])
    with pytest.raises(ImportFormatError, match=r"created_at: is not an ISO-8601 timestamp"):
        convert([dict(bulk[0], created_at="last tuesday")])


# --------------------------------------------------------------------------- AIRI


def test_airi_export_fixture():
    """AIRI's chat-sessions-index:v1: sessions in order, slices/tool results/categorization kept."""
    normalized = convert(AIRI.read_text(encoding="utf-8"), ids=ids())
    _check_records(normalized)
    assert [(m["title"], m["messageCount"], m["characterId"]) for m, _ in normalized] == [
        ("Tokyo weather", 3, "airi"),
        ("画像について", 4, "airi"),
    ]
    (m1, msgs1), (m2, msgs2) = normalized
    assert roles(msgs1) == ["system", "user", "assistant"]
    assert roles(msgs2) == ["user", "assistant", "user", "assistant"]
    reply = msgs1[2]
    assert reply["content"] == "It’s cloudy in Tokyo, 18 °C. 東京は今くもりです☁️"
    assert reply["slices"][0]["type"] == "tool-call"
    assert reply["slices"][0]["toolCall"]["function"]["name"] == "get_weather"
    assert reply["tool_results"] == [{"id": "call_Kx81", "result": '{"temp":18,"condition":"cloudy"}'}]
    assert reply["categorization"]["speech"] == "It’s cloudy in Tokyo, 18 °C."
    assert reply["metadata"]["tools"] == [{"name": "get_weather"}]
    assert reply["metadata"]["sourceId"] == "msg-s1-2" and reply["createdAt"] == 1735723262000
    assert msgs2[0]["content"][1]["type"] == "image_url"
    assert texts(msgs2)[0] == "この絵には何が描かれていますか？"
    assert msgs2[1]["metadata"]["airiRole"] == "error"
    assert msgs2[2]["metadata"]["context"]["contextId"] == "minecraft:events"
    assert (m1["createdAt"], m1["updatedAt"]) == (1735723200000, 1735723262000)


def test_airi_errors_and_index_only_sessions():
    """A wrong AIRI format version or a bad message names its path; index-only metas import empty."""
    data = load(AIRI)
    sid = next(iter(data["sessions"]))
    data["sessions"][sid]["messages"][1]["role"] = "narrator"
    with pytest.raises(
        ImportFormatError, match=rf"^sessions\['{sid}'\]\.messages\[1\]\.role: must be one of"
    ):
        convert(data)
    data = load(AIRI)
    data["sessions"][sid]["messages"][2]["slices"] = [{"type": "dance"}]
    with pytest.raises(ImportFormatError, match=rf"^sessions\['{sid}'\]\.messages\[2\]\.slices"):
        convert(data)
    data = load(AIRI)
    data["format"] = "chat-sessions-index:v2"
    with pytest.raises(ImportFormatError, match="unsupported AIRI export format 'chat-sessions-index:v2'"):
        convert(data)
    data = load(AIRI)
    del data["sessions"][sid]
    normalized = convert(data, ids=ids())
    assert [(m["title"], m["messageCount"]) for m, _ in normalized] == [
        ("画像について", 4),
        ("Tokyo weather", 0),
    ]


def test_fixtures_are_read_in_place_not_copied():
    """The third-party fixtures are not in the repository (one is AGPL)."""
    names = {p.name for p in REPO.rglob("*.json") if "node_modules" not in p.parts}
    assert not names & {BRANCHING.name, WEBSEARCH.name, MULTIMODAL.name, CLAUDE.name}
    assert BRANCHING.is_file() and CLAUDE.is_file()


async def test_imported_history_is_aged_from_its_import():
    """A year-old ChatGPT conversation imported today: the default retention's dry run archives
    nothing (its activity counts from the import), while its own dates stay as they were; a
    restored backup keeps its updatedAt."""

    import chatmem

    mem = await chatmem.open()
    report = await mem.import_sessions(BRANCHING.read_bytes())
    metas = [await mem.sessions.get(sid) for sid in report.session_ids]
    assert all(m.updated_at >= mem.clock() - 60_000 for m in metas)
    assert min(m.created_at for m in metas) == 1714585031149  # the conversation's own date
    dry = await mem.retention.apply(chatmem.RetentionPolicy(), dry_run=True)
    assert dry.archived == [] and dry.deleted == []
    backup = await mem.export()
    other = await chatmem.open()
    await other.import_sessions(backup, preserve_ids=True)
    assert [(await other.sessions.get(m.session_id)).updated_at for m in metas] == [
        m.updated_at for m in metas
    ]
    await mem.close()
    await other.close()


def test_a_conversation_imported_twice_has_the_same_ids_and_others_do_not_collide():
    """Ids derive from the source's conversation and message ids: the same export gives the
    same ids (ULIDs of the records' times), the same message ids in another conversation
    give others, and a conversation without an id gets fresh ones."""
    conv = load(BRANCHING)
    conv = conv[0] if isinstance(conv, list) else conv
    conv = dict(conv, conversation_id="conv-a")
    first = prepare_import([conv], ids=ids())[1]
    again = prepare_import([conv], ids=ids())[1]
    other = prepare_import([dict(conv, conversation_id="conv-b")], ids=ids())[1]
    anonymous = prepare_import([dict(conv, conversation_id=None, id=None)], ids=ids())[1]
    again_anonymous = prepare_import([dict(conv, conversation_id=None, id=None)], ids=ids())[1]

    def all_ids(normalized):
        return [r["sessionId"] for r, _ in normalized] + [m["id"] for _, ms in normalized for m in ms]

    assert len(first) > 1 and all_ids(first) == all_ids(again)
    assert len(set(all_ids(first))) == len(all_ids(first)), "forks' copies have ids of their own"
    assert not set(all_ids(first)) & set(all_ids(other))
    assert not set(all_ids(anonymous)) & set(all_ids(again_anonymous))
    for _, msgs in first:
        assert all(len(m["id"]) == 26 for m in msgs)
        assert [m["id"][:10] for m in msgs] == sorted(m["id"][:10] for m in msgs), "time prefix"
