"""``OfflineFactExtractor``: facts from what the user says about themselves, in English,
with no model and no network.

Precision first. It reads the user's own sentences only (``extract`` hands it
nothing else) and skips every sentence that is a question, a condition or a
wish ("if I lived in Paris", "should I move to Porto?", "I'd love to..."),
reported or quoted speech ("my friend says she lives in..."), or that says
nothing about the speaker. What is left is matched against first-person
statements for every slot: "my name is...", "call me...", "I live in / moved
to...", "I work as / at...", "my birthday is...", "my wife is called...",
"I'm vegetarian", "my sister is called...", "I love / can't stand...",
"I'm allergic to...", "we have a dog named...", "I speak...", "my goal is...";
and their endings: "I don't live in Lisbon any more", "I quit my job at...",
"I'm no longer vegetarian", "we broke up", "our cat Miso died". Names of
people, pets and places must be written with a capital letter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from ..records.facts import Fact, FactOp
from ..records.models import ChatMessage

__all__ = ["OfflineFactExtractor", "sentences"]

_QUESTION_START = re.compile(
    r"^(?:do|does|did|is|are|am|was|were|can|could|should|would|will|shall|may|might|what|where|who|whom|"
    r"whose|when|why|how|which|have|has|had)\b",
    re.I,
)
#: a condition, a wish or a possibility: nothing in it is a fact
_UNREAL = re.compile(
    r"\b(?:if|unless|suppose|supposing|imagine|pretend|wish|would|could|might|maybe|perhaps|someday|"
    r"hypothetically|i'd|should i|what if|whether|planning to move|thinking (?:about|of))\b",
    re.I,
)
#: someone else's words
_REPORTED = re.compile(
    r"[\"“”]|\b(?:says|said|say|told|tells|thinks|believes|according to|asked|claims)\b", re.I
)
#: where a value ends
_STOP = re.compile(
    r"\s*(?:[,.;:!?()]|\s-\s|\b(?:and|but|because|since|so|with|who|which|where|while|now|then|these days|"
    r"nowadays|at the moment|right now|any ?more|again|too|as well|though|although|for (?:a|about|\d)|"
    r"last|this|next|ago|since|until|in \d{4})\b)",
    re.I,
)
_NOT_A_THING = re.compile(
    r"^(?:it|that|this|these|those|you|him|her|them|to|when|how|what|being|the way|the idea|doing|"
    r"a lot|so much|very much|everything|nothing|anything|something)\b",
    re.I,
)

_RELATIONS = {
    "sister": "sister",
    "brother": "brother",
    "mother": "mother",
    "mom": "mother",
    "mum": "mother",
    "father": "father",
    "dad": "father",
    "son": "son",
    "daughter": "daughter",
    "grandmother": "grandmother",
    "grandma": "grandmother",
    "grandfather": "grandfather",
    "grandpa": "grandfather",
    "aunt": "aunt",
    "uncle": "uncle",
    "cousin": "cousin",
}
_REL = "|".join(_RELATIONS)
_PARTNERS = r"wife|husband|partner|girlfriend|boyfriend|fianc[ée]e?"
_ANIMALS = r"dog|cat|puppy|kitten|rabbit|bunny|hamster|guinea pig|parrot|bird|fish|turtle|tortoise|horse|snake|lizard"
_DIETS = r"vegetarian|vegan|pescatarian|gluten[- ]free|keto|lactose[- ]intolerant|kosher|halal"
_BE = r"(?:'m|’m| am)"
_HAVE = r"(?:'ve|’ve| have)"
_A = r"(?:an? )?"

#: capitalised words (a person, a pet, a place): up to four, "de"/"van"/"da" between them
_NAME = r"((?:the )?[A-Z][\w'’-]*(?:\s+(?:(?:de|da|do|van|von|del|la|le)\s+)?[A-Z][\w'’-]*){0,3})"
#: anything up to where a value ends (cut by ``_STOP`` afterwards)
_ANY = r"(.+)"

Proposal = tuple[str, str, str, float]  # key, value, text, importance
Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], list[Proposal]]]


def sentences(text: str) -> Iterator[str]:
    """The sentences of ``text``, each with its end mark (so a question can be told)."""
    for part in re.split(r"(?<=[.!?])\s+|\n+", text.replace("’", "'")):
        part = part.strip()
        if part:
            yield part


def _cut(value: str) -> str:
    m = _STOP.search(value)
    return (value[: m.start()] if m else value).strip(" '\"")


def _thing(value: str, most: int = 6) -> str | None:
    """A liked thing, a job, a goal: cut at where it ends, not a pronoun, not too long."""
    value = re.sub(r"^(?:a |an |the |my |some )", "", _cut(value), flags=re.I)
    if not value or _NOT_A_THING.match(value) or len(value.split()) > most:
        return None
    return value


#: capitalised words that are not names: times, and words a sentence starts with
_NOT_NAMES = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday christmas easter "
    "i i'm im it he she we they you this that there here and but so".split()
)


def _named(value: str) -> str | None:
    """A proper name: capitalised words only, "the" dropped, not a month or a day."""
    value = _cut(value)
    value = re.sub(r"^the ", "", value)
    words = value.split()
    if not words or not all(
        w[0].isupper() or w in ("de", "da", "do", "van", "von", "del", "la", "le") for w in words
    ):
        return None
    if words[0].casefold() in _NOT_NAMES:
        return None
    return value


#: what follows a comma without being part of a list
_FILLER = re.compile(
    r"^(?:by the way|btw|honestly|to be honest|really|though|lol|haha|of course|as you know|i think|i guess|"
    r"you know|actually|for real|seriously|sadly|luckily|anyway)$",
    re.I,
)


def _many(value: str) -> list[str]:
    """``value`` as a list ("hiking, swimming and chess")."""
    head = re.split(r"[.;!?]", value)[0]
    out = []
    for part in re.split(r",\s*(?:and\s+)?|\s+and\s+|\s+or\s+", head):
        if _FILLER.match(part.strip()):
            continue
        t = _thing(part)
        if t:
            out.append(t)
    return out


def _one(
    key: str, text: Callable[[str], str], importance: float, pick: Callable[[str], str | None]
) -> Callable[[re.Match[str]], list[Proposal]]:
    def make(m: re.Match[str]) -> list[Proposal]:
        v = pick(m.group(m.lastindex or 1))
        return [(key, v, text(v), importance)] if v else []

    return make


def _family(m: re.Match[str]) -> list[Proposal]:
    rel = _RELATIONS[m.group(1).lower()]
    name = _named(m.group(2))
    return [(f"family.{rel}", name, f"Has a {rel} called {name}", 0.8)] if name else []


def _pet(m: re.Match[str]) -> list[Proposal]:
    kind, name = m.group(1).lower(), _named(m.group(2))
    return [("pet", name, f"Has a {kind} called {name}", 0.7)] if name else []


def _likes(key: str, verb: str) -> Callable[[re.Match[str]], list[Proposal]]:
    def make(m: re.Match[str]) -> list[Proposal]:
        return [(key, v, f"{verb} {v}", 0.5) for v in _many(m.group(m.lastindex or 1))]

    return make


def _languages(m: re.Match[str]) -> list[Proposal]:
    out = []
    for v in _many(m.group(1)):
        if v[:1].isupper():
            out.append(("language", v, f"Speaks {v}", 0.6))
    return out


def _rules() -> list[Rule]:
    r: list[tuple[str, Callable[[re.Match[str]], list[Proposal]]]] = [
        (rf"(?i:\bmy name(?:'s| is) ){_NAME}", _one("name", lambda v: f"Is called {v}", 0.9, _named)),
        (rf"(?i:\bi{_BE} called ){_NAME}", _one("name", lambda v: f"Is called {v}", 0.9, _named)),
        (
            rf"(?i:\b(?:please |just )?call me ){_NAME}",
            _one("preferred_name", lambda v: f"Likes to be called {v}", 0.9, _named),
        ),
        (
            rf"(?i:\bi go by ){_NAME}",
            _one("preferred_name", lambda v: f"Likes to be called {v}", 0.9, _named),
        ),
        (
            rf"(?i:\b(?:i|we)(?:{_HAVE})? (?:just |recently |finally )?(?:moved|relocated) to ){_NAME}",
            _one("home", lambda v: f"Lives in {v}", 0.8, _named),
        ),
        (
            rf"(?i:\bi (?:now |currently )?live in ){_NAME}",
            _one("home", lambda v: f"Lives in {v}", 0.8, _named),
        ),
        (
            rf"(?i:\bi{_BE} (?:now |currently )?living in ){_NAME}",
            _one("home", lambda v: f"Lives in {v}", 0.8, _named),
        ),
        (rf"(?i:\bmy home is in ){_NAME}", _one("home", lambda v: f"Lives in {v}", 0.8, _named)),
        (
            rf"(?i:\bi (?:now )?work as {_A}){_ANY}",
            _one("job", lambda v: f"Works as {_article(v)}", 0.8, _job),
        ),
        (
            rf"(?i:\bi{_BE} (?:now )?working as {_A}){_ANY}",
            _one("job", lambda v: f"Works as {_article(v)}", 0.8, _job),
        ),
        (rf"(?i:\bmy job is {_A}){_ANY}", _one("job", lambda v: f"Works as {_article(v)}", 0.8, _job)),
        (
            rf"(?i:\bi{_HAVE}? (?:just )?(?:started|begun) (?:working )?as {_A}){_ANY}",
            _one("job", lambda v: f"Works as {_article(v)}", 0.8, _job),
        ),
        (
            rf"(?i:\bi{_BE} {_A}){_ANY} by (?:profession|trade)",
            _one("job", lambda v: f"Works as {_article(v)}", 0.8, _job),
        ),
        (
            rf"(?i:\bi (?:now )?work (?:at|for) ){_NAME}",
            _one("employer", lambda v: f"Works at {v}", 0.7, _named),
        ),
        (
            rf"(?i:\bi{_BE} (?:now )?working (?:at|for) ){_NAME}",
            _one("employer", lambda v: f"Works at {v}", 0.7, _named),
        ),
        (
            rf"(?i:\bi{_HAVE}? (?:just )?(?:got a (?:new )?job|started a (?:new )?job|started working|joined) (?:at|with|for)? ?){_NAME}",
            _one("employer", lambda v: f"Works at {v}", 0.7, _named),
        ),
        (rf"(?i:\bmy birthday is (?:on )?){_ANY}", _one("birthday", lambda v: f"Birthday: {v}", 0.8, _date)),
        (rf"(?i:\bi was born on ){_ANY}", _one("birthday", lambda v: f"Birthday: {v}", 0.8, _date)),
        (
            rf"(?i:\bmy (?:{_PARTNERS})(?:'s name)? is (?:called |named )?){_NAME}",
            _one("partner", lambda v: f"Partner: {v}", 0.8, _named),
        ),
        (
            rf"(?i:\bi{_BE} (?:married|engaged) to ){_NAME}",
            _one("partner", lambda v: f"Partner: {v}", 0.8, _named),
        ),
        (
            rf"(?i:\bi{_BE} (?:a |now |now a |fully )?({_DIETS})\b)",
            _one("diet", lambda v: f"Is {v}", 0.7, _plain),
        ),
        (rf"(?i:\bmy ({_REL})(?:'s name)? is (?:called |named )?){_NAME}", _family),
        (rf"(?i:\bi have an? ({_REL}) (?:called|named) ){_NAME}", _family),
        (rf"(?i:\bmy ({_REL}) ){_NAME} (?!is\b)", _family),
        (
            rf"(?i:\b(?:i|we) (?:have|got|adopted) an? ({_ANIMALS}) (?:called|named) ){_NAME}",
            _pet,
        ),
        (rf"(?i:\b(?:my|our) ({_ANIMALS})(?:'s name)? is (?:called |named )?){_NAME}", _pet),
        (rf"(?i:\b(?:my|our) ({_ANIMALS}) ){_NAME}(?!(?i: is| was))", _pet),
        (
            rf"(?i:\bi{_BE} (?:very |severely |really )?allergic to ){_ANY}",
            _allergies,
        ),
        (
            rf"(?i:\bi have an? (?:severe |bad )?allergy to ){_ANY}",
            _allergies,
        ),
        (
            rf"(?i:\bi (?:really |absolutely |just |truly )?(?:love|like|enjoy|adore) ){_ANY}",
            _likes("likes", "Likes"),
        ),
        (
            rf"(?i:\bi{_BE} (?:a (?:big |huge )?fan of|really into|into|passionate about) ){_ANY}",
            _likes("likes", "Likes"),
        ),
        (
            rf"(?i:\bi (?:really |absolutely |just )?(?:hate|dislike|detest|loathe|can't stand|cannot stand) ){_ANY}",
            _likes("dislikes", "Dislikes"),
        ),
        (rf"(?i:\bi (?:don't|do not) (?:really )?like ){_ANY}", _likes("dislikes", "Dislikes")),
        (rf"(?i:\bi (?:speak|also speak) ){_ANY}", _languages),
        (rf"(?i:\bmy (?:native|first|mother) (?:language|tongue) is ){_ANY}", _languages),
        (
            rf"(?i:\bmy goal is (?:to )?){_ANY}",
            _one("goal", lambda v: f"Goal: {v}", 0.6, lambda v: _thing(v, 8)),
        ),
        (
            rf"(?i:\bi{_BE} (?:currently )?training for ){_ANY}",
            _one("goal", lambda v: f"Goal: {v}", 0.6, _thing),
        ),
    ]
    return [(re.compile(p), fn) for p, fn in r]


def _job(value: str) -> str | None:
    """A job: what comes before where or for whom ("a nurse at the city hospital")."""
    return _thing(re.split(r"\s+(?:at|in|for|on|with|from)\s+", value, maxsplit=1)[0])


def _allergies(m: re.Match[str]) -> list[Proposal]:
    return [("allergy", v, f"Allergic to {v}", 0.9) for v in _many(m.group(m.lastindex or 1))]


def _plain(value: str) -> str | None:
    return value.lower().replace(" ", "-") if value else None


def _date(value: str) -> str | None:
    value = re.split(r"[,.;!?]| and | but ", value)[0].strip()
    if (
        not value
        or len(value.split()) > 4
        or not re.search(r"\d|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec", value, re.I)
    ):
        return None
    return value


def _article(v: str) -> str:
    return ("an " if v[:1].lower() in "aeiou" else "a ") + v


#: endings: (pattern, key, how the value is read); the value names what ends
_ENDINGS: list[tuple[re.Pattern[str], str, Callable[[str], str | None]]] = [
    (re.compile(rf"(?i:\bi (?:don't|do not|no longer) live in ){_NAME}"), "home", _named),
    (re.compile(rf"(?i:\bi(?:{_HAVE})? moved (?:away )?(?:out of|away from) ){_NAME}"), "home", _named),
    (re.compile(rf"(?i:\bi(?:{_HAVE})? (?:quit|left) my job as {_A}){_ANY}"), "job", _thing),
    (re.compile(rf"(?i:\bi (?:no longer|don't|do not) work as {_A}){_ANY}"), "job", _thing),
    (re.compile(rf"(?i:\bi{_BE} (?:no longer|not) an? ){_ANY} any ?more"), "job", _thing),
    (re.compile(rf"(?i:\bi(?:{_HAVE})? (?:quit|left) my job (?:at|with) ){_NAME}"), "employer", _named),
    (re.compile(rf"(?i:\bi (?:no longer|don't|do not) work (?:at|for) ){_NAME}"), "employer", _named),
    (re.compile(rf"(?i:\bi{_BE} (?:no longer|not) ({_DIETS})\b)"), "diet", _plain),
    (re.compile(rf"(?i:\bi{_BE} (?:no longer|not) allergic to ){_ANY}"), "allergy", _thing),
    (
        re.compile(rf"(?i:\bi (?:don't|do not|no longer) (?:like|love|enjoy) ){_ANY} any ?more"),
        "likes",
        _thing,
    ),
    (re.compile(rf"(?i:\bi (?:don't|do not|no longer) speak ){_NAME}"), "language", _named),
]
_PET_GONE = re.compile(rf"(?i:\b(?:my|our) (?:{_ANIMALS}) ){_NAME} (?:died|passed away|ran away)")
_SPLIT_UP = re.compile(
    r"(?i:\b(?:i|we)(?:'ve| have)? (?:broke up|broken up|split up|separated|divorced|got divorced)\b)"
)


class OfflineFactExtractor:
    """The default ``FactExtractor``: English first-person statements, offline and fast."""

    def __init__(self) -> None:
        self._rules = _rules()

    async def extract(self, messages: list[ChatMessage], known: list[Fact]) -> list[FactOp]:
        ops: list[FactOp] = []
        for m in messages:
            if m.role != "user":
                continue
            for s in sentences(m.text):
                ops += self._sentence(s, m.id, known)
        return ops

    def _sentence(self, s: str, source: str, known: list[Fact]) -> list[FactOp]:
        if s.endswith("?") or _QUESTION_START.match(s) or _UNREAL.search(s) or _REPORTED.search(s):
            return []
        out: list[FactOp] = []
        ended: set[str] = set()
        for pattern, key, pick in _ENDINGS:
            for m in pattern.finditer(s):
                v = pick(m.group(m.lastindex or 1))
                if v:
                    out.append(FactOp("invalidate", key, v, source_ids=(source,)))
                    ended.add(m.group(0).lower())
        for m in _PET_GONE.finditer(s):
            name = _named(m.group(1))
            if name:
                out.append(FactOp("invalidate", "pet", name, source_ids=(source,)))
                ended.add(m.group(0).lower())
        if _SPLIT_UP.search(s):
            out += [
                FactOp("invalidate", "partner", f.value, fact_id=f.fact_id, source_ids=(source,))
                for f in known
                if f.key == "partner" and f.status == "active"
            ]
        if out:  # a sentence that ends something says nothing new besides
            return out
        seen: set[tuple[str, str]] = set()
        for pattern, make in self._rules:
            for m in pattern.finditer(s):
                for key, value, text, importance in make(m):
                    if (key, value.casefold()) in seen:
                        continue
                    seen.add((key, value.casefold()))
                    out.append(FactOp("add", key, value, text, source_ids=(source,), importance=importance))
        return out
