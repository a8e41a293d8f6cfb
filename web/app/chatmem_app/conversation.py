"""The conversation view, its header (title, tags, pin/archive/rename/delete)
and the composer (Enter sends, Shift+Enter makes a new line)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import Any

import chatmem
from chatmem.conversations.offline import OFFLINE_LABEL
from chatmem.conversations.sessions import DEFAULT_TITLE
from chatmem.errors import (
    ContextOverflow,
    ProviderAuthError,
    ProviderError,
    ProviderNotFound,
    ProviderRateLimited,
    ProviderServerError,
    ProviderTimeout,
    ProviderUnavailable,
)

from . import dom, settings
from . import render as md
from .dom import h, js, q

__all__ = ["ACTIONS", "KEYS", "jump_to", "message_el", "render", "render_mode_note"]

ROLE_LABEL = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}


def fmt_time(ms: int) -> str:
    opts = dom.js_obj({"dateStyle": "medium", "timeStyle": "short"})
    return str(js.Date.new(ms).toLocaleString(js.undefined, opts))


def iso(ms: int) -> str:
    return str(js.Date.new(ms).toISOString())


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False)


#: ``metadata["origin"]`` of a failed turn's notice, stored so it shows after a reload
#: (``chatmem.records.models.NOT_FOR_MODEL``: never sent to a model)
NOTICE = "notice"


def message_el(m: Any) -> Any:
    if (m.metadata or {}).get("origin") == NOTICE:
        return _failure_el(m.text, m.id)
    offline = m.provider == "offline"
    cls = f"msg {m.role}" + (" offline" if offline else "")
    badges = []
    if offline:
        badges.append(h("span", {"class": "badge offline"}, "offline — from memory"))
    elif m.model:
        badges.append(h("span", {"class": "badge"}, m.model))
    status = (m.metadata or {}).get("status")
    if status in _STATUS:
        cls += f" {status}"
        badges.append(h("span", {"class": f"badge {status}"}, _STATUS[status]))
    if m.role == "tool":
        body = [
            h(
                "details",
                {},
                h("summary", {}, f"Tool result{' · ' + m.name if m.name else ''}"),
                h("pre", {}, h("code", {}, _pretty(m.text))),
            )
        ]
    elif offline and m.text.startswith(OFFLINE_LABEL):
        body = [
            h("p", {"class": "offline-label"}, h("em", {}, OFFLINE_LABEL)),
            [dom.node(n) for n in md.markdown(m.text[len(OFFLINE_LABEL) :].lstrip())],
        ]
    else:
        body = [dom.node(n) for n in md.markdown(m.text)]
        held = _held_parts(m.content)
        if held:
            body.append(
                h("ul", {"class": "attachments"}, [h("li", {"class": "attachment"}, t) for t in held])
            )
        elif not m.text.strip() and not m.tool_calls:
            body = [h("p", {"class": "note"}, "(no text)")]
    calls = []
    for call in m.tool_calls or []:
        fn = (call or {}).get("function") or {}
        calls.append(
            h(
                "details",
                {"class": "tool-call"},
                h("summary", {}, f"Tool call · {fn.get('name') or call.get('type') or 'call'}"),
                h("pre", {}, h("code", {}, _pretty(fn.get("arguments", call)))),
            )
        )
    return h(
        "li",
        {
            "class": cls,
            "id": f"m-{m.id}",
            "data-id": m.id,
            "data-seq": m.seq,
            "tabindex": "-1",
            "aria-label": f"{ROLE_LABEL.get(m.role, m.role)} message",
        },
        h(
            "header",
            {},
            h("span", {"class": "role"}, ROLE_LABEL.get(m.role, m.role)),
            badges,
            h("time", {"datetime": iso(m.created_at)}, fmt_time(m.created_at)),
            h(
                "span",
                {"class": "actions"},
                h(
                    "button",
                    {
                        "type": "button",
                        "class": "btn small ghost",
                        "data-action": "edit",
                        "data-id": m.id,
                        "title": "Edit this message and send it again (the answers after it are replaced)",
                        "aria-label": f"Edit message {m.seq + 1}",
                    },
                    "Edit",
                )
                if m.role == "user"
                else None,
                h(
                    "button",
                    {
                        "type": "button",
                        "class": "btn small ghost",
                        "data-action": "fork",
                        "data-seq": m.seq,
                        "title": "Fork from here: a new conversation up to this message",
                        "aria-label": f"Fork from message {m.seq + 1}",
                    },
                    "Fork",
                ),
            ),
        ),
        h("div", {"class": "body"}, body),
        calls,
    )


#: the badge of an answer that did not end as the model meant (``chatmem.conversations.turn``)
_STATUS = {"stopped": "stopped", "incomplete": "incomplete — it broke off"}

#: what a content part the view cannot show is called in its placeholder
_PART_NAMES = {"image": "Image", "audio": "Audio", "file": "File", "video": "Video"}


def _held_parts(content: Any) -> list[str]:
    """A placeholder line for each part of ``content`` that is not text (an image, a file, a
    recording kept only as a reference by an import): it never disappears without a trace."""
    if not isinstance(content, list):
        return []
    out = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "code", "reasoning", None):
            continue
        name = part.get("name") or part.get("fileName") or part.get("file_name") or ""
        label = _PART_NAMES.get(str(kind), str(kind).replace("_", " ").capitalize())
        out.append(f"[{label}{': ' + str(name) if name else ''} — not included in this copy]")
    return out


def _title(app: Any, meta: Any) -> None:
    wrap = q("#title-wrap")
    if meta is None:
        dom.mount(wrap, h("h2", {"id": "conv-title"}, "chatmem"))
        return
    dom.mount(wrap, h("h2", {"id": "conv-title", "title": meta.title}, meta.title or "Untitled"))


def _bar(app: Any, meta: Any) -> None:
    bar = q("#session-bar")
    if meta is None:
        dom.clear(bar)
        return
    parent = (
        next((s for s in app.sessions if s.session_id == meta.parent_id), None) if meta.parent_id else None
    )
    lineage = None
    if meta.parent_id:
        where = f"at message {meta.fork_index}" if meta.fork_index is not None else ""
        lineage = h(
            "span",
            {"class": "lineage"},
            "Forked from ",
            h(
                "button",
                {
                    "type": "button",
                    "class": "btn small ghost",
                    "data-action": "open",
                    "data-id": meta.parent_id,
                },
                parent.title if parent else "a deleted conversation",
            )
            if parent
            else "a deleted conversation",
            f" {where}",
        )
    dom.mount(
        bar,
        h(
            "span",
            {"class": "tags", "aria-label": "Tags"},
            [
                h(
                    "span",
                    {"class": "tag"},
                    t,
                    h(
                        "button",
                        {
                            "type": "button",
                            "data-action": "tag-remove",
                            "data-tag": t,
                            "aria-label": f"Remove tag {t}",
                        },
                        "×",
                    ),
                )
                for t in meta.tags
            ],
            h("label", {"for": "tag-input", "class": "sr-only"}, "Add a tag"),
            h(
                "input",
                {
                    "id": "tag-input",
                    "class": "tag-input",
                    "placeholder": "+ tag",
                    "data-key": "tag-add",
                    "autocomplete": "off",
                    "maxlength": "40",
                },
            ),
        ),
        lineage,
        h("span", {"class": "spacer"}),
        h(
            "button",
            {
                "type": "button",
                "class": "btn small",
                "data-action": "pin",
                "aria-pressed": "true" if meta.pinned else "false",
            },
            "Unpin" if meta.pinned else "Pin",
        ),
        h("button", {"type": "button", "class": "btn small", "data-action": "rename"}, "Rename"),
        h(
            "button",
            {"type": "button", "class": "btn small", "data-action": "archive"},
            "Unarchive" if meta.archived else "Archive",
        ),
        h(
            "button",
            {"type": "button", "class": "btn small danger", "data-action": "delete-session"},
            "Delete",
        ),
    )


def render_mode_note(app: Any) -> None:
    s = app.settings
    if settings.provider_configured(s):
        text = f"Model: {s['provider']['model']} at {s['provider']['base_url']}"
    else:
        text = "No model configured — replies come from your memory, offline. Add one in Settings."
    dom.mount(q("#mode-note"), f"Enter sends · Shift+Enter adds a line · {text}")


async def render(app: Any) -> None:
    meta = app.current_meta()
    _title(app, meta)
    _bar(app, meta)
    render_mode_note(app)
    ol = q("#messages")
    if meta is None:
        dom.mount(
            ol,
            h(
                "li",
                {"class": "welcome"},
                h("h2", {}, "Your conversations stay on this device."),
                h(
                    "p",
                    {},
                    "Start typing below to begin a new conversation. Everything is saved in this "
                    "browser, works offline, and can be searched, forked, exported and synced.",
                ),
            ),
        )
        return
    msgs = await app.mem.messages.list(meta.session_id, limit=None)
    if not msgs:
        dom.mount(ol, h("li", {"class": "welcome"}, h("p", {}, "No messages yet. Say hello below.")))
    else:
        dom.mount(ol, [message_el(m) for m in msgs])
        _mark_last()
    _scroll_bottom()


async def refresh(app: Any) -> None:
    """Draw the open conversation again with what the store now holds (another tab wrote,
    a pull arrived), keeping the reader where they are unless they were at the end. When
    it holds the messages already shown, nothing is drawn (an opened detail stays open)."""
    meta = app.current_meta()
    if meta is not None:
        stored = [m.id for m in await app.mem.messages.list(meta.session_id, limit=None)]
        shown = [str(li.dataset.id) for li in js.document.querySelectorAll("#messages > li.msg[data-id]")]
        if stored == shown:
            return
    c = q("#conversation")
    at_end = c.scrollHeight - c.scrollTop - c.clientHeight < 40
    top = c.scrollTop
    await render(app)
    if not at_end:
        c.scrollTop = top


def _scroll_bottom() -> None:
    c = q("#conversation")
    c.scrollTop = c.scrollHeight


def jump_to(message_id: str) -> None:
    el = q(f'[id="m-{message_id}"]')
    if el is None:
        return
    el.scrollIntoView(dom.js_obj({"block": "center", "behavior": "instant"}))
    el.classList.add("flash")
    el.focus(dom.js_obj({"preventScroll": True}))
    dom.set_timeout(lambda: el.classList.remove("flash"), 2500)


# ---------------------------------------------------------------------- sending


class Live:
    """An assistant message being streamed into the view (text only until stored)."""

    def reset(self) -> None:
        """Forget what arrived (another answer streams into it instead)."""
        self.text = ""
        self.body.textContent = ""

    def note(self, text: str) -> None:
        """Say what the reply waits for (replaced by the first piece that arrives)."""
        self.body.textContent = text

    def __init__(self) -> None:
        self.body = h("p", {})
        self.el = h(
            "li",
            {"class": "msg assistant streaming", "aria-busy": "true"},
            h(
                "header",
                {},
                h("span", {"class": "role"}, "Assistant"),
                h("span", {"class": "badge"}, "writing…"),
            ),
            h("div", {"class": "body"}, self.body),
        )
        self.text = ""

    def add(self, piece: str) -> None:
        self.text += piece
        self.body.textContent = self.text
        _scroll_bottom()


def _append_el(el: Any) -> None:
    ol = q("#messages")
    w = q(".welcome", ol)
    if w:
        w.remove()
    ol.appendChild(el)
    _scroll_bottom()


class _Draft:
    """The user's message as shown while ``session.send`` stores it (replaced by the stored one)."""

    def __init__(self, sid: str, text: str):
        self.id, self.session_id, self.seq, self.role, self.content = "draft", sid, 0, "user", text
        self.text, self.created_at, self.provider, self.model = text, int(time.time() * 1000), None, None
        self.metadata: dict[str, Any] = {}
        self.name, self.tool_calls = None, None


def _failure_el(text: str, notice_id: str | None = None) -> Any:
    """A failed turn: what happened, in plain words, and Retry (a stored notice carries its
    id, so the view can tell it from the messages)."""
    attrs = {"class": "msg system failed", "role": "alert"}
    if notice_id is not None:
        attrs.update({"id": f"m-{notice_id}", "data-id": notice_id, "data-notice": "1"})
    return h(
        "li",
        attrs,
        h("header", {}, h("span", {"class": "role"}, "The reply failed")),
        h(
            "div",
            {"class": "body"},
            h("p", {}, text),
            h(
                "button",
                {"type": "button", "class": "btn small", "data-action": "retry"},
                "Retry",
            ),
        ),
    )


def _mark_last() -> None:
    """The conversation's last answer offers Regenerate (and Continue, if it broke off or
    was stopped); no other message does."""
    for b in js.document.querySelectorAll("#messages .turn-again"):
        b.remove()
    items = js.document.querySelectorAll("#messages > li.msg[data-id]")
    if not items.length:
        return
    last = items[items.length - 1]
    if not last.classList.contains("assistant") or last.classList.contains("streaming"):
        return
    actions = q(".actions", last)
    if actions is None:
        return
    if last.classList.contains("incomplete") or last.classList.contains("stopped"):
        actions.prepend(
            h(
                "button",
                {"type": "button", "class": "btn small ghost turn-again", "data-action": "continue"},
                "Continue",
            )
        )
    actions.prepend(
        h(
            "button",
            {
                "type": "button",
                "class": "btn small ghost turn-again",
                "data-action": "regenerate",
                "title": "Ask the model again for a new answer to your last message",
            },
            "Regenerate",
        )
    )


async def send(app: Any, text: str) -> None:
    """One chat turn through ``mem.session(id).send``: the user message is stored first,
    the reply streams into the view and is stored only once complete."""
    mem = app.mem
    if not app.current or app.current_meta() is None:
        s = await mem.sessions.create()
        app.view_archived = False
        await app.refresh_sessions()
        await app.open_session(s.session_id)
    sid = app.current
    meta = app.current_meta()
    if meta is not None and meta.title == DEFAULT_TITLE:
        await mem.sessions.update(sid, title=" ".join(text.split())[:60])
        _title(app, await mem.sessions.get(sid))
    draft = message_el(_Draft(sid, text))
    draft.querySelector(".actions").remove()
    _append_el(draft)
    live = Live()
    _append_el(live.el)
    s = app.settings
    failure = fallback = None
    stopped = False
    provider = settings.chat_provider(mem, s)
    turn = _turn_options(s, live)
    task = asyncio.current_task()
    if task is not None:
        app.streaming[sid] = task
    composer_state(app)
    try:
        if settings.provider_configured(s) and not bool(js.navigator.onLine):
            # offline, and the page knows it: answer from memory at once
            fallback = "You are offline"
            await mem.session(sid).send(text, provider=chatmem.OfflineResponder(mem), **turn)
        else:
            failure = await _asked_once_more(
                app, sid, mem.session(sid).send(text, provider=provider, **turn), provider, turn, live
            )
    except ProviderUnavailable as e:
        if e.partial is not None:  # it broke off after some text: that text is the answer kept
            failure = plain_error(e)
        else:  # no answer at all from the model server: the message is stored; answer from memory
            fallback = "The model could not be reached"
            live.reset()
            try:
                await mem.session(sid).reply(provider=chatmem.OfflineResponder(mem), **turn)
            except ProviderError as again:
                failure = plain_error(again)
    except ProviderError as e:
        failure = plain_error(e)
    except ContextOverflow as e:
        failure = f"Your message is saved, but it is too long for the {s['budget']} budget ({e})."
    except asyncio.CancelledError:
        stopped = True  # Stop: what arrived is stored, marked stopped; the view shows it as stored
    except BaseException:
        live.el.remove()  # no half answer left on screen; the error is shown by the caller
        raise
    finally:
        app.streaming.pop(sid, None)
        composer_state(app)
        await app.refresh_sessions()
    if failure and not live.text:
        await _store_notice(app, sid, failure)
    if stopped or failure or not (draft.isConnected and live.el.isConnected):
        # the stored messages are the truth (also when the list was drawn again while the
        # answer streamed: the session was re-read or another one opened)
        if app.current == sid:
            await render(app)
            if failure and live.text:  # about the text kept above, marked incomplete
                _append_el(_failure_el(failure))
        return
    stored = await mem.messages.list(sid, limit=2, newest_first=True)
    for m in reversed(stored):
        el = message_el(m)
        if m.role == "user":
            draft.replaceWith(el)
        else:
            live.el.replaceWith(el)
    _mark_last()
    if fallback:
        _append_el(_fallback_el(sid, fallback))
    _scroll_bottom()
    if app.panel == "context":
        await app.render_panel()


#: the longest wait a 429 may ask for that the app sits out by itself (seconds)
RETRY_WAIT_MAX = 60
#: the wait before asking again after a 429 that did not say (or whose Retry-After the
#: browser hides: a cross-origin answer shows it only when the server exposes it)
RETRY_WAIT_DEFAULT = 5


async def _asked_once_more(
    app: Any, sid: str, call: Awaitable[Any], provider: Any, turn: dict[str, Any], live: Live
) -> str | None:
    """``call`` (a turn); when the model answers 429, the wait and one more ask of
    ``_retry_once``, run outside the exception handler so that Stop ends the wait too.
    The failure to show, if any."""
    try:
        await call
        return None
    except ProviderRateLimited as e:
        limited = e
    return await _retry_once(app, sid, limited, provider, turn, live)


async def _retry_once(
    app: Any, sid: str, e: Any, provider: Any, turn: dict[str, Any], live: Live
) -> str | None:
    """A 429 that says when to come back: the reply shows the wait, then asks once more by
    itself (the message is stored already); the failure to show when that fails too."""
    wait = e.retry_after_ms / 1000 if e.retry_after_ms else RETRY_WAIT_DEFAULT
    if e.partial is not None or wait > RETRY_WAIT_MAX:
        return plain_error(e)
    live.reset()
    live.note(f"The model is busy (HTTP 429); asking again in {max(1, round(wait))} s…")
    await asyncio.sleep(wait)
    live.reset()
    try:
        await app.mem.session(sid).reply(provider=provider, **turn)
    except ProviderError as again:
        return plain_error(again)
    return None


def plain_error(e: Exception) -> str:
    """What a failed turn says, in plain words, with what to do next."""
    saved = "Your message is saved"
    if getattr(e, "partial", None) is not None:
        return f"The answer broke off mid-stream; what arrived is kept above, marked incomplete. {saved}."
    if isinstance(e, ProviderRateLimited):
        wait = e.retry_after_ms
        when = f" It asked to wait {max(1, round(wait / 1000))} s." if wait else ""
        return f"The model is busy (too many requests, HTTP 429).{when} {saved}; try again in a moment."
    if isinstance(e, ProviderAuthError):
        return f"The model server refused the key ({e.status}): check the API key in Settings. {saved}."
    if isinstance(e, ProviderNotFound):
        return f"The model server does not know this address or model (HTTP 404): check Settings. {saved}."
    if isinstance(e, ProviderServerError):
        status = f"HTTP {e.status}" if e.status else "mid-stream"
        return f"The model server failed ({status}). {saved}; try again later."
    if isinstance(e, ProviderTimeout):
        return f"The model did not answer in time. {saved}; try again later."
    return f"The model could not answer ({e}). {saved}; try again later."


def composer_state(app: Any) -> None:
    """The send button says Stop while the open conversation's reply streams."""
    btn = q("#send-btn")
    if btn is None:
        return
    streaming = app.current in app.streaming
    btn.textContent = "Stop" if streaming else "Send"
    btn.setAttribute("aria-label", "Stop the reply" if streaming else "Send")
    btn.classList.toggle("stop", streaming)


def stop(app: Any) -> bool:
    """Stop the reply streaming in the open conversation (what arrived is kept); whether one was."""
    task = app.streaming.get(app.current)
    if task is None:
        return False
    task.cancel()
    return True


def _turn_options(s: dict[str, Any], live: Live) -> dict[str, Any]:
    """What every turn hands ``send`` / ``reply``: the budget, prompt, retrieval and the view."""
    return {
        "budget": s["budget"],
        "system_prompt": s["provider"]["system_prompt"] or None,
        "retrieval": settings.retrieval_config(s),
        "on_token": live.add,
    }


def _fallback_el(sid: str, why: str) -> Any:
    """Says the answer above came from memory, and offers the model's once it is back."""
    return h(
        "li",
        {"class": "msg system fallback", "role": "status"},
        h("header", {}, h("span", {"class": "role"}, "Answered from memory")),
        h(
            "div",
            {"class": "body"},
            h(
                "p",
                {},
                f"{why}, so this answer comes from your saved conversations. Your message is saved; "
                "the model never sees this answer as its own.",
            ),
            h(
                "button",
                {"type": "button", "class": "btn small", "data-action": "ask-model", "data-id": sid},
                "Send to the model",
            ),
        ),
    )


async def _store_notice(app: Any, sid: str, text: str) -> None:
    """Keep a failed turn's notice with the conversation: it shows after a reload, and no
    model ever receives it (``origin`` ``NOTICE``)."""
    await app.mem.messages.append(sid, "assistant", text, metadata={"origin": NOTICE})


async def _answer(app: Any, sid: str, drop: list[str]) -> None:
    """The model's answer to the conversation as it stands, once ``drop`` (messages after the
    last of the user's: an earlier answer, a partial one, a notice) is deleted; a failure is
    kept as a notice, as in ``send``."""
    if sid in app.streaming:
        return
    if drop:
        await app.mem.sessions.delete_messages(sid, drop)
    if app.current == sid:
        await render(app)
    live = Live()
    _append_el(live.el)
    task = asyncio.current_task()
    if task is not None:
        app.streaming[sid] = task
    composer_state(app)
    turn = _turn_options(app.settings, live)
    provider = settings.chat_provider(app.mem, app.settings)
    failure = None
    try:
        failure = await _asked_once_more(
            app, sid, app.mem.session(sid).reply(provider=provider, **turn), provider, turn, live
        )
    except ProviderError as e:
        failure = plain_error(e)
    except ContextOverflow as e:
        failure = f"The conversation is too long for the {app.settings['budget']} budget ({e})."
    except asyncio.CancelledError:
        pass  # Stop: what arrived is stored, marked stopped
    finally:
        app.streaming.pop(sid, None)
        composer_state(app)
    if failure and not live.text:
        await _store_notice(app, sid, failure)
    await app.refresh_sessions()
    if app.current == sid:
        await render(app)
        if failure and live.text:
            _append_el(_failure_el(failure))


async def _after_last_user(app: Any, sid: str) -> list[str]:
    """The ids of the messages after the user's last one: what Retry and Regenerate replace."""
    msgs = await app.mem.messages.list(sid, limit=None)
    users = [i for i, m in enumerate(msgs) if m.role == "user"]
    return [m.id for m in msgs[users[-1] + 1 :]] if users else []


async def _retry(app: Any, el: Any, ev: Any) -> None:
    """Ask the model again for the user's last message (the failed turn's notice goes)."""
    sid = app.current
    if sid is not None:
        await _answer(app, sid, await _after_last_user(app, sid))


async def _continue(app: Any, el: Any, ev: Any) -> None:
    """Ask the model to go on from the answer that broke off or was stopped."""
    if app.current is not None:
        await _answer(app, app.current, [])


async def _ask_model(app: Any, el: Any, ev: Any) -> None:
    """The model's answer to the conversation as it stands (its answer from memory is kept,
    and never sent to it)."""
    await _answer(app, str(el.getAttribute("data-id")), [])


async def _edit(app: Any, el: Any, ev: Any) -> None:
    """Edit a message of the user's in place: a box with its text, Send again and Cancel."""
    li = dom.closest(el, "li")
    if li is None or q(".edit-box", li) is not None:
        return
    body = q(".body", li)
    text = (await app.mem.messages.get(str(li.getAttribute("data-id")))).text  # as written, not as drawn
    box = h(
        "div",
        {"class": "edit-box"},
        h("textarea", {"class": "edit-text", "aria-label": "Edit your message", "rows": "3"}, text),
        h(
            "div",
            {"class": "edit-actions"},
            h(
                "button",
                {"type": "button", "class": "btn small primary", "data-action": "edit-send"},
                "Send again",
            ),
            h("button", {"type": "button", "class": "btn small", "data-action": "edit-cancel"}, "Cancel"),
            h("span", {"class": "note"}, "The answers after it are replaced."),
        ),
    )
    body.hidden = True
    li.appendChild(box)
    ta = q(".edit-text", box)
    ta.value = text
    ta.focus()


async def _edit_cancel(app: Any, el: Any, ev: Any) -> None:
    li = dom.closest(el, "li")
    box = q(".edit-box", li) if li is not None else None
    if box is not None:
        box.remove()
        q(".body", li).hidden = False


async def _edit_send(app: Any, el: Any, ev: Any) -> None:
    """Send the edited message instead: it and everything after it go, the new text is sent."""
    li = dom.closest(el, "li")
    sid = app.current
    if li is None or sid is None or sid in app.streaming:
        return
    text = str(q(".edit-text", li).value).strip()
    if not text:
        return
    msgs = await app.mem.messages.list(sid, limit=None)
    mid = str(li.getAttribute("data-id"))
    at = next((i for i, m in enumerate(msgs) if m.id == mid), None)
    if at is None:
        return
    await app.mem.sessions.delete_messages(sid, [m.id for m in msgs[at:]])
    await render(app)
    await send(app, text)


async def _send(app: Any, el: Any, ev: Any) -> None:
    """Send the composer's text; while the open conversation's reply streams, the button
    (and Escape) stops it instead. Another conversation can be written to meanwhile."""
    if stop(app):
        return
    ta = q("#composer-input")
    text = str(ta.value).strip()
    if not text:
        return
    ta.value = ""
    ta.style.height = "auto"
    try:
        await send(app, text)
    finally:
        ta.focus()


def _composer_key(app: Any, el: Any, ev: Any) -> None:
    if ev.key == "Enter" and not ev.shiftKey and not ev.isComposing:
        ev.preventDefault()
        app.run(_send(app, el, ev))


# ---------------------------------------------------------------------- session actions


async def _after_meta_change(app: Any) -> None:
    await app.refresh_sessions()
    meta = app.current_meta()
    _title(app, meta)
    _bar(app, meta)


async def _pin(app: Any, el: Any, ev: Any) -> None:
    meta = app.current_meta()
    await app.mem.sessions.pin(meta.session_id, not meta.pinned)
    await _after_meta_change(app)
    q('#session-bar [data-action="pin"]').focus()


async def _archive(app: Any, el: Any, ev: Any) -> None:
    meta = app.current_meta()
    await app.mem.sessions.update(meta.session_id, archived=not meta.archived)
    await _after_meta_change(app)
    app.toast(
        "Archived — find it under Archived." if not meta.archived else "Back in your active conversations."
    )
    q('#session-bar [data-action="archive"]').focus()


async def _rename(app: Any, el: Any, ev: Any) -> None:
    meta = app.current_meta()
    inp = h(
        "input",
        {"id": "rename-input", "data-key": "rename", "aria-label": "Conversation title", "maxlength": "200"},
    )
    inp.value = meta.title
    dom.mount(q("#title-wrap"), inp)
    inp.focus()
    inp.select()


def _rename_key(app: Any, el: Any, ev: Any) -> None:
    if ev.key == "Enter":
        ev.preventDefault()
        app.run(_rename_save(app, str(el.value).strip()))
    elif ev.key == "Escape":
        ev.preventDefault()
        ev.stopPropagation()
        _title(app, app.current_meta())
        q('#session-bar [data-action="rename"]').focus()


async def _rename_save(app: Any, title: str) -> None:
    if title:
        await app.mem.sessions.update(app.current, title=title)
    await _after_meta_change(app)
    q('#session-bar [data-action="rename"]').focus()


def _tag_key(app: Any, el: Any, ev: Any) -> None:
    if ev.key == "Enter":
        ev.preventDefault()
        tag = " ".join(str(el.value).split())
        if tag:
            app.run(_tag_add(app, tag))


async def _tag_add(app: Any, tag: str) -> None:
    meta = app.current_meta()
    await app.mem.sessions.update(meta.session_id, tags=[*meta.tags, tag])
    await _after_meta_change(app)
    q("#tag-input").focus()


async def _tag_remove(app: Any, el: Any, ev: Any) -> None:
    meta = app.current_meta()
    tag = str(el.getAttribute("data-tag"))
    await app.mem.sessions.update(meta.session_id, tags=[t for t in meta.tags if t != tag])
    await _after_meta_change(app)
    q("#tag-input").focus()


async def _fork(app: Any, el: Any, ev: Any) -> None:
    seq = int(el.getAttribute("data-seq"))
    meta = app.current_meta()
    fork = await app.mem.sessions.fork(
        meta.session_id, at_index=seq + 1, reason=f"forked at message {seq + 1}"
    )
    await app.mem.sessions.update(fork.session_id, title=f"{meta.title} (fork)")
    await app.refresh_sessions()
    await app.open_session(fork.session_id)
    app.toast(f"Forked: a new conversation with the first {seq + 1} message{'s' if seq else ''}.")
    q("#composer-input").focus()


ACTIONS = {
    "send": _send,
    "ask-model": _ask_model,
    "retry": _retry,
    "regenerate": _retry,
    "continue": _continue,
    "edit": _edit,
    "edit-send": _edit_send,
    "edit-cancel": _edit_cancel,
    "pin": _pin,
    "archive": _archive,
    "rename": _rename,
    "tag-remove": _tag_remove,
    "fork": _fork,
}

KEYS = {
    "composer": _composer_key,
    "rename": _rename_key,
    "tag-add": _tag_key,
}
