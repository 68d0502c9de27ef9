"""The worker fixtures of tests/worker, for the workflow tests that run real worker processes."""

from __future__ import annotations

from tests.worker.conftest import spawn as spawn

__all__ = ["spawn"]
