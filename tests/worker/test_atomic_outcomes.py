"""Property: an atomic handler's writes are committed if and only if its job completed on that
attempt, whatever the attempts do: return, raise with a retry, raise terminally, get cancelled
while running, or lose their lease to a rescue.

One worker serves every example (its queue one slot wide, so a rescue run while a handler waits
at its gate can only take that handler's job); each example enqueues a batch of jobs, each with
the script of its first attempt, and waits for all of them to end. The handler writes an
``Execution`` row (job, attempt, lease) first, in its transaction; a committed row is what the test
reads back from its own connection.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.exceptions import TerminalError
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.retry import policy
from awa_django.services.jobs import cancel_jobs
from awa_django.worker import JobContext
from awa_django.worker.config import QueueConfig
from testproject.demo.models import Execution
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import rescue_running

QUEUE = "atomic_props"
KIND = "atomic_scripted"
ACTIONS = ("return", "retry", "terminal", "cancel", "rescue")
# The job's final state, and the attempt its writes must come from (None: no writes at all).
EXPECTED = {
    "return": ("completed", 1),
    "retry": ("completed", 2),
    "terminal": ("failed", None),
    "cancel": ("cancelled", None),
    "rescue": ("completed", 2),
}
FINAL = {"completed", "failed", "cancelled"}


class Script:
    """What the handler's first attempts do, and the gates the test opens for the waiting ones."""

    def __init__(self) -> None:
        self.waiting: queue.Queue[int] = queue.Queue()
        self.gates: dict[int, threading.Event] = {}
        self.actions: dict[int, str] = {}  # every example's jobs: a failed example may leave some
        self.lock = threading.Lock()

    def gate(self, job_id: int) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(job_id, threading.Event())

    def open_all(self) -> None:
        with self.lock:
            for gate in self.gates.values():
                gate.set()

    def handler(self, context: JobContext, action: str) -> None:
        Execution.objects.create(
            job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=os.getpid()
        )
        if context.attempt > 1:
            return
        if action == "retry":
            raise ValueError("declined, try again")
        if action == "terminal":
            raise TerminalError("declined for good")
        if action in ("cancel", "rescue"):
            self.waiting.put(context.job_id)
            self.gate(context.job_id).wait(60)


@pytest.fixture
def script() -> Iterator[Script]:
    value = Script()
    try:
        yield value
    finally:
        value.open_all()


def _step(ids: dict[int, str], script: Script) -> bool:
    """One step of the example: cancel or rescue a job whose first attempt waits at its gate, then
    open the gate. True once every job has ended."""
    try:
        job_id = script.waiting.get_nowait()
    except queue.Empty:
        pass
    else:
        if script.actions[job_id] == "cancel":
            assert cancel_jobs([job_id]) == 1
        else:
            assert rescue_running() == [job_id]  # one slot: only the waiting job runs
        script.gate(job_id).set()
    return not Job.objects.filter(pk__in=list(ids)).exclude(state__in=FINAL).exists()


@pytest.mark.django_db(transaction=True)
def test_atomic__any_outcomes__writes_committed_iff_the_attempt_completed(script: Script) -> None:
    registry = Registry()
    registry.register(
        JobHandler(
            KIND,
            script.handler,
            queue=QUEUE,
            takes_context=True,
            atomic=True,
            max_attempts=2,
            retry=policy(KIND, backoff=lambda attempt: 0.0),
        )
    )
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=1)})
    with running_worker(config, registry=registry) as worker:

        @settings(max_examples=12)
        @given(st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=6))
        def check(actions: list[str]) -> None:
            ids = {Job.objects.enqueue(KIND, {"action": action}, queue=QUEUE).id: action for action in actions}
            script.actions.update(ids)
            wait_until(lambda: _step(ids, script), timeout=120, what=f"every job of {actions} to end")
            rows = {pk: (state, attempt, lease) for pk, state, attempt, lease in _rows(ids)}
            writes: dict[int, list[tuple[int, int]]] = {pk: [] for pk in ids}
            for job_id, attempt, lease in Execution.objects.filter(job_id__in=list(ids)).values_list(
                "job_id", "attempt", "run_lease"
            ):
                writes[job_id].append((attempt, lease))
            for pk, action in ids.items():
                state, attempt, lease = rows[pk]
                expected_state, writing_attempt = EXPECTED[action]
                assert state == expected_state, (action, rows[pk])
                # Committed writes: exactly the completed attempt's, once; none for any other.
                expected = [] if writing_attempt is None else [(writing_attempt, lease)]
                assert writes[pk] == expected, (action, rows[pk], writes[pk])
                if state == "completed":
                    assert attempt == writing_attempt

        check()
        refused = worker.completer.lost + worker.completer.discarded
    assert refused > 0, "no attempt lost its lease or was cancelled: the examples never tried it"


def _rows(ids: dict[int, str]) -> Any:
    return Job.objects.filter(pk__in=list(ids)).values_list("pk", "state", "attempt", "run_lease")
