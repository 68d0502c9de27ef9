"""Handlers for the workflow tests, registered under kinds starting with ``wf.``."""

from __future__ import annotations

from typing import Any

from awa_django import JobContext, TerminalError, job
from awa_django.workflows import Workflow


@job("wf.value", takes_context=True)
def value(context: JobContext, value: Any = None) -> Any:
    """Returns ``value``: what its dependents read."""
    return value


@job("wf.sum", takes_context=True)
def sum_upstreams(context: JobContext) -> int:
    """The sum of every completed upstream's result."""
    return sum(u.result for u in context.upstreams() if u.completed)


@job("wf.sum_async", takes_context=True)
async def sum_async(context: JobContext) -> int:
    return sum(u.result for u in await context.aupstreams() if u.completed)


@job("wf.echo", takes_context=True)
def echo(context: JobContext, name: str) -> Any:
    """The result of the upstream called ``name``."""
    return context.upstream(name)


@job("wf.fail", max_attempts=1)
def fail() -> None:
    raise TerminalError("this step fails on purpose")


@job("wf.split", takes_context=True)
def split(context: JobContext, n: int) -> int:
    """Dynamic fan-out: adds ``n`` parts to its own workflow, before its own dependents."""
    workflow = Workflow.extending(context.job_id)
    for i in range(n):
        workflow.add("wf.value", {"value": i}, name="part")
    workflow.enqueue()
    return n
