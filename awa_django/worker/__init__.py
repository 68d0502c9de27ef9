"""The worker runtime: one asyncio loop, a runner per queue, batched writes, maintenance.

``Worker(config).run()`` is the whole runtime; ``build_config`` turns settings, command-line
options and ``Queue`` rows into a validated ``WorkerConfig``. Imported lazily, so that loading
the app (and ``JobContext`` for handlers) does not pull in the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa_django.context import JobContext

if TYPE_CHECKING:
    from awa_django.worker.config import QueueConfig, WorkerConfig, build_config
    from awa_django.worker.supervisor import Worker

__all__ = ["JobContext", "QueueConfig", "Worker", "WorkerConfig", "build_config"]


def __getattr__(name: str) -> Any:
    if name in ("QueueConfig", "WorkerConfig", "build_config"):
        from awa_django.worker import config

        return getattr(config, name)
    if name == "Worker":
        from awa_django.worker.supervisor import Worker

        return Worker
    raise AttributeError(f"module 'awa_django.worker' has no attribute {name!r}")
