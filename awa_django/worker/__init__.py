"""The worker runtime: one asyncio loop, a dispatcher per queue, batched writes, maintenance.

``Worker(config).run()`` is the whole runtime; ``build_config`` turns settings, command-line
options and ``Queue`` rows into a validated ``WorkerConfig``.
"""

from awa_django.worker.config import QueueConfig, WorkerConfig, build_config
from awa_django.worker.context import JobContext
from awa_django.worker.runtime import Worker

__all__ = ["JobContext", "QueueConfig", "Worker", "WorkerConfig", "build_config"]
