"""The registry's resolver hook, and the resolver the Tasks backend adds: module path → handler."""

from __future__ import annotations

import logging

import pytest
from django.utils.module_loading import import_string

from awa_django.backends import AwaBackend, connect_task_backends, resolve_task
from awa_django.registry import TASK_METADATA_KEY, TASKS_BACKEND_PATH, JobHandler, Registry, registry
from tests.tasks.tasks import add_async, label


def noop() -> None:
    pass


def test_get__registered_handler_wins_over_resolvers() -> None:
    target = Registry()
    handler = target.register(JobHandler("k", noop))
    target.add_resolver(lambda kind: JobHandler(kind, print))
    assert target.get("k") is handler


def test_get__falls_back_to_resolvers_in_order_and_none_when_none_resolves() -> None:
    target = Registry()
    target.add_resolver(lambda kind: None)
    target.add_resolver(lambda kind: JobHandler(kind, noop) if kind.startswith("x.") else None)
    resolved = target.get("x.y")
    assert resolved is not None and resolved.kind == "x.y"
    assert target.get("y") is None
    assert "x.y" not in target  # resolved kinds are not registered handlers


def test_get__a_failing_resolver_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    def broken(kind: str) -> JobHandler | None:
        raise RuntimeError("resolver bug")

    target = Registry()
    target.add_resolver(broken)
    target.add_resolver(lambda kind: JobHandler(kind, noop))
    with caplog.at_level(logging.ERROR, logger="awa_django.registry"):
        resolved = target.get("k")
    assert resolved is not None and resolved.func is noop
    assert "resolver failed kind=k" in caplog.text


def test_queues__include_the_queues_resolvers_serve() -> None:
    target = Registry()
    target.register(JobHandler("k", noop, queue="emails"))
    target.add_resolver(resolve_task, queues=["default"])
    target.add_resolver(resolve_task, queues=["reports"])  # adding again adds queues
    assert target.queues() == {"emails", "default", "reports"}
    target.remove_resolver(resolve_task)
    assert target.queues() == {"emails"}


def test_connect_task_backends__adds_the_resolver_with_the_TASKS_queues() -> None:
    target = Registry()
    connect_task_backends(target)
    assert target.queues() == {"default"}
    assert target.get("testproject.demo.tasks.add") is not None


def test_the_global_registry__resolves_tasks_after_autodiscovery() -> None:
    handler = registry.get("testproject.demo.tasks.add")
    assert handler is not None
    assert handler.takes_context and not handler.is_async and handler.queue == "default"


def test_resolve_task__wraps_async_tasks_in_async_handlers_once() -> None:
    handler = resolve_task(add_async.module_path)
    assert handler is not None and handler.is_async
    assert resolve_task(add_async.module_path) is handler
    sync = resolve_task(label.module_path)
    assert sync is not None and not sync.is_async


@pytest.mark.parametrize(
    "kind",
    ["noop", "no_such_module.task", "tests.tasks.tasks.BoomError", "os.path", "not a.path"],
)
def test_resolve_task__kinds_that_are_not_tasks_give_none(kind: str) -> None:
    assert resolve_task(kind) is None


def test_resolve_task__a_module_that_fails_to_import_gives_a_handler_raising_its_error() -> None:
    handler = resolve_task("tests.tasks.unimportable.anything")
    assert handler is not None
    with pytest.raises(RuntimeError, match="fails to import on purpose"):
        handler.func(None)


# --- the unknown-kind hint: a task's job names TASKS, any other job @job ----------------------

TASK_METADATA = {TASK_METADATA_KEY: {"backend": "reports", "priority": 0, "run_after": None}}


def test_unknown_kind_hint__a_plain_job__names_job_and_jobs_py() -> None:
    hint = Registry().unknown_kind_hint("shop.tasks.add", {"other": 1})
    assert hint == "register one with @job('shop.tasks.add') in an installed app's jobs.py"


def test_unknown_kind_hint__a_task_in_a_process_without_the_backend__names_TASKS_and_a_restart() -> None:
    hint = Registry().unknown_kind_hint("shop.tasks.add", TASK_METADATA)
    assert "TASKS['reports']" in hint and f"'BACKEND': '{TASKS_BACKEND_PATH}'" in hint
    assert hint.endswith("restart the worker")
    assert "@job" not in hint and "jobs.py" not in hint


def test_unknown_kind_hint__a_task_where_the_backend_is_configured__names_the_code_to_deploy() -> None:
    target = Registry()
    target.add_resolver(resolve_task, queues=["reports"])
    hint = target.unknown_kind_hint("shop.tasks.add", TASK_METADATA)
    assert "does not import in this worker" in hint and "deploy the code" in hint
    assert "TASKS" not in hint and "@job" not in hint


def test_unknown_kind_hint__names_the_backend_by_a_path_that_imports_it() -> None:
    # The documented path (the package re-exports the class defined in awa_django.backends.enqueue).
    assert TASKS_BACKEND_PATH == "awa_django.backends.AwaBackend"
    assert import_string(TASKS_BACKEND_PATH) is AwaBackend
