"""Message text to a safe element tree: a small Markdown subset, written here.

The output is a tree of ``(tag, attrs, children)`` tuples whose leaves are
plain strings; ``dom.node`` turns it into DOM nodes with text nodes only, so
content is never parsed as HTML. Supported: paragraphs, fenced code blocks,
``#`` headings, ``>`` quotes, ``-``/``*``/``1.`` lists, inline code, bold,
italic and http(s) links. Pure Python: runs on CPython for tests.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["Node", "inline", "markdown", "snippet"]

Node = str | tuple[str, dict[str, Any], list[Any]]

#: quotes nested deeper than this are shown as their text; the tree (and every walk of it) stays shallow
MAX_QUOTE_DEPTH = 8
#: inline markup nested deeper than this (bold in italic in bold ...) is shown as text
MAX_INLINE_DEPTH = 6

_FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^(#{1,4})\s+(.*)$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d{1,3}[.)]\s+(.*)$")
_INLINE = re.compile(
    r"(?P<code>`[^`\n]+`)"
    r"|(?P<bold>\*\*[^*\n]+\*\*|__[^_\n]+__)"
    r"|(?P<em>(?<![\w*])\*[^*\s][^*\n]*\*(?![\w*])|(?<![\w_])_[^_\s][^_\n]*_(?![\w_]))"
    r"|(?P<link>\[[^\]\n]+\]\((?:https?://)[^\s)]+\))"
)
_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?://)[^\s)]+)\)")


def inline(text: str, depth: int = 0) -> list[Node]:
    """Inline markup of one block: code, bold, italic, links; the rest is text."""
    if depth >= MAX_INLINE_DEPTH:
        return [text]
    out: list[Node] = []
    pos = 0
    for m in _INLINE.finditer(text):
        if m.start() > pos:
            out.append(text[pos : m.start()])
        s = m.group(0)
        if m.group("code"):
            out.append(("code", {}, [s[1:-1]]))
        elif m.group("bold"):
            out.append(("strong", {}, inline(s[2:-2], depth + 1)))
        elif m.group("em"):
            out.append(("em", {}, inline(s[1:-1], depth + 1)))
        else:
            lm = _LINK.match(s)
            assert lm is not None
            out.append(
                (
                    "a",
                    {"href": lm.group(2), "rel": "noopener noreferrer nofollow", "target": "_blank"},
                    [lm.group(1)],
                )
            )
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def markdown(text: str, depth: int = 0) -> list[Node]:
    """Block structure of ``text`` as a list of nodes (quotes nest at most ``MAX_QUOTE_DEPTH`` deep)."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[Node] = []
    para: list[str] = []
    i = 0

    def flush() -> None:
        if para:
            out.append(("p", {}, inline("\n".join(para))))
            para.clear()

    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            body: list[str] = []
            i += 1
            while i < len(lines) and not _FENCE.match(lines[i]):
                body.append(lines[i])
                i += 1
            attrs = {"data-lang": fence.group(1)} if fence.group(1) else {}
            out.append(("pre", {}, [("code", attrs, ["\n".join(body)])]))
            i += 1
            continue
        if not line.strip():
            flush()
            i += 1
            continue
        head = _HEADING.match(line)
        if head:
            flush()
            out.append(("h3" if len(head.group(1)) <= 2 else "h4", {}, inline(head.group(2))))
            i += 1
            continue
        if line.startswith(">"):
            flush()
            quote: list[str] = []
            while i < len(lines) and lines[i].startswith(">"):
                quote.append(lines[i][1:].lstrip())
                i += 1
            if depth + 1 >= MAX_QUOTE_DEPTH:
                out.append(("blockquote", {}, [("p", {}, ["\n".join(quote)])]))
            else:
                out.append(("blockquote", {}, markdown("\n".join(quote), depth + 1)))
            continue
        for pattern, tag in ((_BULLET, "ul"), (_NUMBERED, "ol")):
            if pattern.match(line):
                flush()
                items: list[Node] = []
                while i < len(lines) and (m := pattern.match(lines[i])):
                    items.append(("li", {}, inline(m.group(1))))
                    i += 1
                out.append((tag, {}, items))
                break
        else:
            para.append(line)
            i += 1
    flush()
    return out


def snippet(text: str, spans: list[tuple[int, int]], width: int = 120) -> list[Node]:
    """A window of ``text`` (one line: its runs of white space are single spaces, as
    ``spans`` were found in) around its first span, every span in it in ``<mark>``."""
    start = 0
    if spans and len(text) > width:
        start = max(0, min(spans[0][0] - width // 3, len(text) - width))
    end = min(len(text), start + width)
    out: list[Node] = ["…"] if start else []
    pos = start
    for a, b in spans:
        a, b = max(a, start), min(b, end)
        if a >= b:
            continue
        if a > pos:
            out.append(text[pos:a])
        out.append(("mark", {}, [text[a:b]]))
        pos = b
    if pos < end:
        out.append(text[pos:end])
    if end < len(text):
        out.append("…")
    return out
