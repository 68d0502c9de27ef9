"""Jobs that wait for jobs: workflows, batches, and awaiting a result (docs/guide/workflows.md).

- ``Workflow(name).add(kind, args, after=[...])``, ``Batch``, and the canvas shorthands ``step``,
  ``chain``, ``group``, ``chord``; ``always(...)`` marks an edge that runs its dependent however
  the upstream ended.
- A dependent is ``waiting`` (claimable by no worker) until its upstream jobs allow it; it is
  released by the statement that writes its last upstream's outcome (``awa_release_jobs``).
- ``cancel_workflow`` / ``retry_workflow``; ``wait`` / ``await_result`` (also ``Job.wait``).
"""

from __future__ import annotations

from awa_django.workflows.declare import Batch, Workflow
from awa_django.workflows.graph import Step, Upstream, always, chain, chord, group, step

__all__ = [
    "Batch",
    "Step",
    "Upstream",
    "Workflow",
    "always",
    "chain",
    "chord",
    "group",
    "step",
]
