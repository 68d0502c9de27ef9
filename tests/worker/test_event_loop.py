"""``awa_worker``'s event loop: uvloop where it is installed (``AWA["EVENT_LOOP"]`` "auto"), the
standard loop when asked (or when uvloop is missing), and a clear refusal when uvloop is required
but absent: the factory, the setting's rule, and real workers running jobs on each loop, the loop
read from the worker's own log line."""

from __future__ import annotations

import asyncio
import sys

import pytest
from django.test import override_settings

from awa_django.checks import check_settings
from awa_django.exceptions import ConfigurationError
from awa_django.models import Job
from awa_django.worker.process import loop_factory
from tests.worker.support import Spawner, wait_for_row

uvloop = pytest.importorskip("uvloop")  # the test extra installs it (not on Windows)


def test_loop_factory__asyncio_is_the_standard_loop() -> None:
    assert loop_factory("asyncio") == (None, "asyncio")


def test_loop_factory__auto_and_uvloop_take_uvloop_where_it_is_installed() -> None:
    for choice in ("auto", "uvloop"):
        factory, name = loop_factory(choice)
        assert factory is uvloop.new_event_loop
        assert name == f"uvloop {uvloop.__version__}"
        loop = factory()
        try:
            assert isinstance(loop, uvloop.Loop)
            assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
        finally:
            loop.close()


def test_loop_factory__without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert loop_factory("auto") == (None, "asyncio")
    with pytest.raises(ConfigurationError, match=r"pip install 'awa-django\[uvloop\]'"):
        loop_factory("uvloop")


@pytest.mark.parametrize("value", ["uv", "", "ASYNCIO", 1, None])
def test_event_loop_setting__a_value_not_among_the_choices_is_e015_naming_it(value: object) -> None:
    with override_settings(AWA={"EVENT_LOOP": value}):
        messages = check_settings()
    assert [m.id for m in messages] == ["awa.E015"]
    assert f"AWA['EVENT_LOOP'] is {value!r}" in messages[0].msg
    assert "'auto', 'asyncio', 'uvloop'" in messages[0].msg


def test_event_loop_setting__uvloop_required_but_not_installed_is_e015_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a))
    with override_settings(AWA={"EVENT_LOOP": "uvloop"}):
        messages = check_settings()
    assert [m.id for m in messages] == ["awa.E015"]
    assert "pip install 'awa-django[uvloop]'" in messages[0].msg


@pytest.mark.parametrize(
    ("args", "logged"), [((), "event loop uvloop"), (("--event-loop", "asyncio"), "event loop asyncio")]
)
def test_awa_worker__runs_jobs_on_the_loop_it_names(spawn: Spawner, args: tuple[str, ...], logged: str) -> None:
    worker = spawn("-q", "loops", "-v", "2", *args)
    jobs = [Job.objects.enqueue("noop", queue="loops") for _ in range(20)]
    for job in jobs:
        wait_for_row(job.pk, state="completed", timeout=60)
    worker.assert_alive()
    assert logged in worker.log, worker.log[-3000:]
