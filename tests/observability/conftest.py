"""The worker tests' fixtures (reaped subprocesses, gates) for the observability tests."""

from tests.worker.conftest import gates, spawn

__all__ = ["gates", "spawn"]
