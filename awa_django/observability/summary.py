"""A worker that says what it did: one summary line every few seconds while jobs run.

``SummarySink`` wraps the worker's metrics sink (every call is passed on) and counts what passes
through it: outcomes per queue, and the seconds each attempt waited from due to claimed. The first
attempt that ends in a quiet worker starts a window; ``interval`` seconds later one INFO line on
the ``awa_django.worker.summary`` logger says what the window held, and the window closes. Nothing
is scheduled while no job ends, so an idle worker prints nothing. The per-outcome lines of
``joblog`` stay as they are (completed at DEBUG: ``-v 2`` shows them).

The window is timed with ``loop.call_later`` on the worker's loop, where the sink is called: no
task of its own, nothing in the claim loop. Counting costs a dict update and a list append per
attempt; the waits kept per window are a bounded random sample, so the p50 is an estimate past
``WAIT_SAMPLE`` attempts.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from awa_django.observability.sink import MetricsSink, WorkerGauges

if TYPE_CHECKING:
    from awa_django.observability.endpoints import EndpointServer

logger = logging.getLogger("awa_django.worker.summary")

SUMMARY_INTERVAL_DEFAULT = 10.0
WAIT_SAMPLE = 4096
# The outcomes every queue's segment names, even at 0; the others only when they happened.
ALWAYS = ("completed", "retried", "failed")
SOMETIMES = ("snoozed", "parked", "cancelled", "discarded", "handed_back", "lost", "rescued")


def median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass
class Window:
    """What ended in one window: outcome counts and a sample of waits, per queue. Pure."""

    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    waits: dict[str, list[float]] = field(default_factory=dict)
    seen_waits: dict[str, int] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)

    def started(self, queue: str, waited: float | None) -> None:
        if waited is None:
            return
        sample = self.waits.setdefault(queue, [])
        seen = self.seen_waits[queue] = self.seen_waits.get(queue, 0) + 1
        if len(sample) < WAIT_SAMPLE:
            sample.append(waited)
        else:  # reservoir sampling: every wait of the window equally likely to be kept
            slot = self.rng.randrange(seen)
            if slot < WAIT_SAMPLE:
                sample[slot] = waited

    def finished(self, queue: str, outcome: str) -> None:
        self.outcomes.setdefault(queue, Counter())[outcome] += 1

    def __bool__(self) -> bool:
        return bool(self.outcomes)

    def line(self, seconds: float) -> tuple[str, dict[str, dict[str, float | int | None]]]:
        """The summary text, and the same figures by queue (for a structured formatter)."""
        parts = []
        figures: dict[str, dict[str, float | int | None]] = {}
        for queue in sorted(self.outcomes):
            counts = self.outcomes[queue]
            p50 = median(self.waits.get(queue, []))
            entry: dict[str, float | int | None] = {name: counts[name] for name in ALWAYS}
            entry.update({name: counts[name] for name in SOMETIMES if counts[name]})
            entry["wait_p50_ms"] = None if p50 is None else round(p50 * 1000.0, 1)
            figures[queue] = entry
            text = " ".join(f"{name}={value}" for name, value in entry.items() if name != "wait_p50_ms")
            wait = "-" if p50 is None else f"{p50 * 1000.0:.1f}"
            parts.append(f"queue={queue} {text} wait_p50_ms={wait}")
        return f"last {seconds:.1f}s: " + "; ".join(parts), figures


class SummarySink(MetricsSink):
    """Passes every call on to ``inner`` and logs a summary per window (see the module docstring)."""

    def __init__(
        self,
        inner: MetricsSink,
        interval: float = SUMMARY_INTERVAL_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.interval = interval
        self.clock = clock
        self.window = Window()
        self.opened_at: float | None = None  # when the open window's first attempt ended
        self._timer: asyncio.TimerHandle | None = None

    @property
    def endpoints(self) -> EndpointServer | None:
        """The inner sink's HTTP server (the probes attach to it)."""
        return self.inner.endpoints

    @endpoints.setter
    def endpoints(self, server: EndpointServer | None) -> None:
        self.inner.endpoints = server

    def bind(self, gauges: Callable[[], WorkerGauges]) -> None:
        self.inner.bind(gauges)

    def job_started(self, queue: str, kind: str, waited: float | None) -> None:
        self.inner.job_started(queue, kind, waited)
        self.window.started(queue, waited)

    def job_finished(self, queue: str, kind: str, outcome: str, seconds: float | None) -> None:
        self.inner.job_finished(queue, kind, outcome, seconds)
        self.window.finished(queue, outcome)
        if self.opened_at is None:
            self.opened_at = self.clock()
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # not on a loop: the window closes at the next attempt past its end, or close()
            self._timer = loop.call_later(self.interval, self.flush)
        elif self._timer is None and self.clock() - self.opened_at >= self.interval:
            self.flush()

    def flush(self) -> None:
        """Log the open window's line, if anything ended in it, and close the window."""
        self._timer = None
        window, opened = self.window, self.opened_at
        self.window, self.opened_at = Window(), None
        if window and opened is not None:
            text, figures = window.line(max(self.clock() - opened, self.interval))
            logger.info("%s", text, extra={"summary": figures})

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:  # noqa: S104 - an operator's choice
        self.inner.serve(port, addr)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()
        self.inner.close()
