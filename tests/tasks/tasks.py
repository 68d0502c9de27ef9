"""Module-level tasks for the tests (the framework refuses tasks defined anywhere else)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.tasks.framework import task


class BoomError(RuntimeError):
    pass


@task()
def boom(message: str) -> None:
    raise BoomError(message)


@task(takes_context=True)
def flaky(context: Any, value: str) -> dict[str, Any]:
    """Fails on its first attempt; then reports what its context said."""
    if context.attempt < 2:
        raise ValueError(f"attempt {context.attempt} fails on purpose")
    result = context.task_result
    return {
        "value": value,
        "attempt": context.attempt,
        "id": result.id,
        "status": str(result.status),
        "errors": [error.exception_class_path for error in result.errors],
    }


@task()
async def add_async(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task()
def label(name: str) -> str:
    return name


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": args, "kwargs": kwargs}


@task()
def unstorable() -> set[int]:
    return {1, 2}


@task()
def exits(code: int) -> None:
    raise SystemExit(code)


@task()
def calls_exit() -> None:
    exit("the task called exit()")  # the builtin a script calls


@task()
def interrupted() -> None:
    raise KeyboardInterrupt


@task()
async def exits_async() -> None:
    await asyncio.sleep(0)
    raise SystemExit(3)


@task()
def undecodable() -> bytes:
    return b"\xff\xfe"


@task()
def returns_nul() -> dict[str, str]:
    return {"note": "a\x00b"}  # JSON holds it; Postgres' jsonb does not


@task()
def enqueues_label(name: str) -> dict[str, Any]:
    """Enqueues ``label`` and reports what the result it got back said at that moment."""
    inner = label.enqueue(name)
    return {"id": inner.id, "status": str(inner.status)}
