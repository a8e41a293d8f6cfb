"""The Memory panel, "what I know about you": the facts ``mem.facts`` learnt or was told,
grouped by what they are about, each with where it was said (a click opens the
message), Edit, Pin, Forget and its history ("Lived in Lisbon until 3 Mar"); a field
to tell it something; facts waiting for approval when review is on; the switches for
learning and review."""

from __future__ import annotations

import copy
import time
from typing import Any

from chatmem.errors import ValidationError

from . import dom
from .dom import h, q

__all__ = ["ACTIONS", "render", "LABELS"]

#: how a slot is headed in the panel (others: their key, readable)
LABELS = {
    "name": "Name",
    "preferred_name": "Call me",
    "home": "Home",
    "job": "Work",
    "employer": "Work",
    "birthday": "Birthday",
    "partner": "Partner",
    "diet": "Food",
    "allergy": "Allergies",
    "likes": "Likes",
    "dislikes": "Dislikes",
    "pet": "Pets",
    "language": "Languages",
    "goal": "Goals",
    "note": "Notes",
}


def _label(key: str) -> str:
    if key.startswith("family."):
        return "Family"
    return LABELS.get(key, key.replace("_", " ").replace(".", " ").capitalize())


def _day(ms: int) -> str:
    return time.strftime("%-d %b %Y", time.gmtime(ms / 1000))


async def _fact_el(app: Any, f: Any) -> Any:
    said = await app.mem.facts.sources(f.fact_id)
    history = await app.mem.facts.history(f.fact_id)
    source = None
    if said:
        meta = await app.mem.sessions.get(said[-1].session_id)
        source = h(
            "button",
            {
                "type": "button",
                "class": "btn small ghost fact-source",
                "data-action": "fact-source",
                "data-session": said[-1].session_id,
                "data-message": said[-1].id,
            },
            f"said in “{meta.title}”",
        )
    elif f.origin == "user":
        source = h("span", {"class": "note"}, "you told me")
    earlier = [v for v in history if v.fact_id != f.fact_id and v.valid_to is not None]
    return h(
        "li",
        {"class": "fact" + (" pinned" if f.pinned else ""), "data-id": f.fact_id},
        h("span", {"class": "fact-text"}, f.text),
        source,
        h(
            "span",
            {"class": "fact-actions"},
            h(
                "button",
                {
                    "type": "button",
                    "class": "btn small ghost",
                    "data-action": "fact-edit",
                    "data-id": f.fact_id,
                },
                "Edit",
            ),
            h(
                "button",
                {
                    "type": "button",
                    "class": "btn small ghost",
                    "data-action": "fact-pin",
                    "data-id": f.fact_id,
                },
                "Unpin" if f.pinned else "Pin",
            ),
            h(
                "button",
                {
                    "type": "button",
                    "class": "btn small danger",
                    "data-action": "fact-forget",
                    "data-id": f.fact_id,
                },
                "Forget",
            ),
        ),
        h(
            "details",
            {"class": "fact-history"},
            h("summary", {}, "Before"),
            h("ul", {}, [h("li", {}, f"{v.text} until {_day(v.valid_to)}") for v in earlier]),
        )
        if earlier
        else None,
    )


async def render(app: Any, body: Any) -> None:
    prefs = app.settings["memory"]
    facts = await app.mem.facts.list()
    pending = await app.mem.facts.list(status="pending")
    groups: dict[str, list[Any]] = {}
    for f in sorted(facts, key=lambda f: (not f.pinned, f.key, f.valid_from)):
        groups.setdefault(_label(f.key), []).append(f)
    sections = []
    for label, items in groups.items():
        sections.append(h("h3", {}, label))
        sections.append(h("ul", {"class": "facts"}, [await _fact_el(app, f) for f in items]))
    waiting = [
        h(
            "li",
            {"class": "fact pending", "data-id": f.fact_id},
            h("span", {"class": "fact-text"}, f.text),
            h(
                "span",
                {"class": "fact-actions"},
                h(
                    "button",
                    {
                        "type": "button",
                        "class": "btn small",
                        "data-action": "fact-approve",
                        "data-id": f.fact_id,
                    },
                    "Keep",
                ),
                h(
                    "button",
                    {
                        "type": "button",
                        "class": "btn small ghost",
                        "data-action": "fact-reject",
                        "data-id": f.fact_id,
                    },
                    "Not true",
                ),
            ),
        )
        for f in pending
    ]
    dom.append(
        body,
        h(
            "div",
            {"class": "memory-switches"},
            h(
                "label",
                {},
                h(
                    "input",
                    {
                        "type": "checkbox",
                        "id": "memory-learn",
                        "data-change": "memory-learn",
                        "checked": prefs["learn"],
                    },
                ),
                " Learn about me from what I write",
            ),
            h(
                "label",
                {},
                h(
                    "input",
                    {
                        "type": "checkbox",
                        "id": "memory-review",
                        "data-change": "memory-review",
                        "checked": prefs["review"],
                    },
                ),
                " Ask me before remembering",
            ),
        ),
        h(
            "form",
            {"class": "fact-add", "data-action": "fact-add"},
            h("label", {"for": "fact-add-text"}, "Tell me something about you"),
            h(
                "input",
                {
                    "id": "fact-add-text",
                    "type": "text",
                    "maxlength": "500",
                    "placeholder": "e.g. My birthday is on 3 May",
                    "aria-describedby": "fact-add-error",
                },
            ),
            h("button", {"type": "submit", "class": "btn small"}, "Remember"),
            h("p", {"id": "fact-add-error", "class": "status-err", "role": "alert"}),
        ),
        h("h3", {}, "Waiting for you") if waiting else None,
        h("ul", {"class": "facts", "id": "facts-pending"}, waiting) if waiting else None,
        h("div", {"id": "facts"}, sections)
        if sections
        else h(
            "p",
            {"class": "note", "id": "facts-empty"},
            "Nothing yet. Tell me about yourself — your name, where you live, what you like — and it shows up here.",
        ),
    )


async def _switch(app: Any, name: str, on: bool) -> None:
    new = copy.deepcopy(app.settings)
    new["memory"][name] = on
    await app.save_settings(new)
    await app.render_panel()


async def _learn(app: Any, el: Any, ev: Any) -> None:
    await _switch(app, "learn", bool(el.checked))


async def _review(app: Any, el: Any, ev: Any) -> None:
    await _switch(app, "review", bool(el.checked))


async def _pin(app: Any, el: Any, ev: Any) -> None:
    fact = await app.mem.facts.get(str(el.getAttribute("data-id")))
    await app.mem.facts.update(fact.fact_id, pinned=not fact.pinned)
    await app.render_panel()


async def _forget(app: Any, el: Any, ev: Any) -> None:
    fact = await app.mem.facts.get(str(el.getAttribute("data-id")))
    await app.mem.facts.delete(fact.fact_id)
    app.toast(f"Forgotten: {fact.text}")
    await app.render_panel()


async def _edit(app: Any, el: Any, ev: Any) -> None:
    """Turn the fact into a form: its sentence and its value, Save and Cancel."""
    fact = await app.mem.facts.get(str(el.getAttribute("data-id")))
    item = q(f'li.fact[data-id="{fact.fact_id}"]')
    if item is None:
        return
    form = h(
        "form",
        {"class": "fact-edit", "data-action": "fact-save", "data-id": fact.fact_id},
        h("label", {"for": "fact-edit-text"}, "What I know"),
        h("input", {"id": "fact-edit-text", "type": "text", "maxlength": "500", "value": fact.text}),
        h("label", {"for": "fact-edit-value"}, _label(fact.key)),
        h("input", {"id": "fact-edit-value", "type": "text", "maxlength": "200", "value": fact.value}),
        h("button", {"type": "submit", "class": "btn small primary"}, "Save"),
        h(
            "button",
            {"type": "button", "class": "btn small ghost", "data-action": "fact-edit-cancel"},
            "Cancel",
        ),
        h("p", {"id": "fact-edit-error", "class": "status-err", "role": "alert"}),
    )
    dom.mount(item, form)
    q("#fact-edit-text").focus()


async def _save(app: Any, el: Any, ev: Any) -> None:
    """A corrected fact is a new version: the old one stays in its history."""
    fid = str(el.getAttribute("data-id"))
    text, value = str(q("#fact-edit-text").value).strip(), str(q("#fact-edit-value").value).strip()
    try:
        await app.mem.facts.update(fid, text=text, value=value)
    except ValidationError as e:
        dom.mount(q("#fact-edit-error"), str(e))
        return
    await app.render_panel()


async def _cancel_edit(app: Any, el: Any, ev: Any) -> None:
    await app.render_panel()


async def _add(app: Any, el: Any, ev: Any) -> None:
    field = q("#fact-add-text")
    text = str(field.value).strip()
    if not text:
        dom.mount(q("#fact-add-error"), "Write something first.")
        field.focus()
        return
    try:
        await app.mem.facts.add(text)
    except ValidationError as e:
        dom.mount(q("#fact-add-error"), str(e))
        return
    app.toast(f"I'll remember: {text}")
    await app.render_panel()


async def _approve(app: Any, el: Any, ev: Any) -> None:
    await app.mem.facts.approve(str(el.getAttribute("data-id")))
    await app.render_panel()


async def _reject(app: Any, el: Any, ev: Any) -> None:
    await app.mem.facts.reject(str(el.getAttribute("data-id")))
    await app.render_panel()


async def _source(app: Any, el: Any, ev: Any) -> None:
    """Open the conversation where the fact was said, at that message."""
    await app.open_session(
        str(el.getAttribute("data-session")), focus_message=str(el.getAttribute("data-message"))
    )


ACTIONS = {
    "fact-add": _add,
    "fact-edit": _edit,
    "fact-save": _save,
    "fact-edit-cancel": _cancel_edit,
    "memory-learn": _learn,
    "memory-review": _review,
    "fact-pin": _pin,
    "fact-forget": _forget,
    "fact-approve": _approve,
    "fact-reject": _reject,
    "fact-source": _source,
}
