"""Fault injection for tests: make the reference server misbehave on purpose.

A ``FaultPlan`` holds a queue of faults (taken in order, each by the next
matching request) and an optional random rate. Kinds:

- ``status``: answer ``status`` (500, 503, 429 with ``Retry-After`` ...) with a
  JSON error body and CORS headers, so a browser can read it;
- ``delay``: hold the request ``seconds`` (a client with a shorter timeout
  gives up), then serve it normally;
- ``drop``: close the connection without any answer.

``after=True`` serves the request first (the push *is* applied) and then
inflicts the fault on the answer: the case that proves idempotency (a lost
acknowledgement must not apply an operation twice).

The plan is thread-safe: tests change it from their thread while the server
runs in its own. ``fired`` lists what was inflicted, ``seen`` counts requests
per path. ``FaultPlan.parse("500x3,429:2,drop,delay:1.5,after:drop,random:0.2:7")``
builds one from the ``--faults`` flag.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from ..errors import ValidationError, shown

__all__ = ["Fault", "FaultPlan"]

FaultKind = Literal["status", "delay", "drop"]


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    status: int = 500
    retry_after: str | None = None
    seconds: float = 0.0
    after: bool = False
    #: the request path it applies to ("*": any path but /v1/health)
    path: str = "/v1/push"

    def describe(self) -> str:
        what = {"status": str(self.status), "delay": f"delay:{self.seconds}", "drop": "drop"}[self.kind]
        return ("after:" if self.after else "") + what


class FaultPlan:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Fault] = []
        self._rate = 0.0
        self._rng = random.Random()
        self._random_kinds: tuple[Fault, ...] = ()
        self._random_after = 0.0
        self._random_path = "/v1/push"
        self.fired: list[tuple[str, str]] = []
        self.seen: Counter[str] = Counter()
        #: set when the server stops, so held requests end early
        self.stopping = threading.Event()

    # ------------------------------------------------------------------ building
    def add(self, fault: Fault, times: int = 1) -> FaultPlan:
        with self._lock:
            self._queue.extend([fault] * times)
        return self

    def fail(
        self,
        times: int = 1,
        status: int = 500,
        *,
        path: str = "/v1/push",
        after: bool = False,
        retry_after: str | None = None,
    ) -> FaultPlan:
        """Answer the next ``times`` matching requests with ``status``."""
        return self.add(Fault("status", status, retry_after, path=path, after=after), times)

    def rate_limit(self, times: int = 1, retry_after: str | int = 1, *, path: str = "/v1/push") -> FaultPlan:
        """429 with ``Retry-After`` (seconds, or an HTTP-date string)."""
        return self.fail(times, 429, path=path, retry_after=str(retry_after))

    def delay(
        self, seconds: float, times: int = 1, *, path: str = "/v1/push", after: bool = False
    ) -> FaultPlan:
        return self.add(Fault("delay", seconds=seconds, path=path, after=after), times)

    def drop(self, times: int = 1, *, path: str = "/v1/push", after: bool = False) -> FaultPlan:
        return self.add(Fault("drop", path=path, after=after), times)

    def random(
        self,
        rate: float,
        *,
        seed: int | None = None,
        kinds: tuple[Fault, ...] = (
            Fault("status", 500),
            Fault("delay", seconds=2.0),
            Fault("drop"),
        ),
        after_ratio: float = 0.5,
        path: str = "/v1/push",
    ) -> FaultPlan:
        """With probability ``rate``, a request with no queued fault gets one of ``kinds``
        (half of them, by default, after the request was served)."""
        if not 0.0 <= rate <= 1.0:
            raise ValidationError("rate must be in [0, 1]", field="rate")
        with self._lock:
            self._rate = rate
            self._rng = random.Random(seed)
            self._random_kinds = kinds
            self._random_after = after_ratio
            self._random_path = path
        return self

    def clear(self) -> FaultPlan:
        """No more faults (queued or random); counters are kept."""
        with self._lock:
            self._queue.clear()
            self._rate = 0.0
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    # ------------------------------------------------------------------ serving
    @staticmethod
    def _matches(pattern: str, path: str) -> bool:
        return pattern == path or (pattern == "*" and path != "/v1/health")

    def take(self, path: str) -> Fault | None:
        """The fault for this request, if any (removed from the queue), and count it."""
        with self._lock:
            self.seen[path] += 1
            for i, f in enumerate(self._queue):
                if self._matches(f.path, path):
                    del self._queue[i]
                    self.fired.append((path, f.describe()))
                    return f
            if (
                self._rate
                and self._random_kinds
                and self._matches(self._random_path, path)
                and self._rng.random() < self._rate
            ):
                base = self._rng.choice(self._random_kinds)
                after = self._rng.random() < self._random_after
                f = Fault(base.kind, base.status, base.retry_after, base.seconds, after, path)
                self.fired.append((path, f.describe()))
                return f
        return None

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Build from ``--faults``: comma-separated ``[after:]KIND[xN]`` items.

        KIND is a status (``500``), ``429:SECONDS``, ``drop`` or ``delay:SECONDS``;
        ``random:RATE[:SEED]`` sets a random rate. Faults apply to ``/v1/push``.
        """
        plan = cls()
        for raw in (s.strip() for s in spec.split(",")):
            if not raw:
                continue
            try:
                if raw.startswith("random:"):
                    parts = raw.split(":")
                    plan.random(float(parts[1]), seed=int(parts[2]) if len(parts) > 2 else None)
                    continue
                after = raw.startswith("after:")
                item = raw[len("after:") :] if after else raw
                times = 1
                if "x" in item:
                    item, n = item.rsplit("x", 1)
                    times = int(n)
                if item == "drop":
                    plan.drop(times, after=after)
                elif item.startswith("delay:"):
                    plan.delay(float(item.split(":", 1)[1]), times, after=after)
                elif item.startswith("429:"):
                    plan.add(Fault("status", 429, item.split(":", 1)[1], after=after), times)
                elif item.isdigit() and 400 <= int(item) <= 599:
                    plan.fail(times, int(item), after=after)
                else:
                    raise ValueError(item)
            except (ValueError, IndexError) as e:
                raise ValidationError(f"bad fault {shown(raw)} in {shown(spec)}", field="faults") from e
        return plan
