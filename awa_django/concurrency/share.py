"""One host's capacity split over the worker processes of ``awa_worker --processes N``.

In capacity scope "process" each process applies the capacity settings on its own. With
``--processes N`` the settings are meant for the host as a whole, so process ``i`` of ``N`` runs
with its part of them: the global maximum, every queue's ``min_workers`` (weighted mode) or
``max_workers`` (hard-reserved mode), its rate limit and burst. Every process serves every queue
and claims from the same table, so the split costs no work-conservation: a job goes to whichever
process has a free slot for its queue. Weights are proportions and stay as they are.

The split is exact: the parts of every number add up to it. A number's remainder goes one unit
at a time to the processes in turn, continuing from queue to queue (in name order), and the global
maximum's remainder to the first processes; so when the floors fit the global maximum, each
process's floors fit its part of it (process ``i`` gets ``q + [i < r]`` floor units when the floors
add up to ``q·N + r``, and at least that much of the maximum). A global maximum below N, or in
hard-reserved mode a queue whose ``max_workers`` is below N, cannot give every process a slot:
that is refused, naming the value.
In capacity scope "cluster" nothing is split: the cluster's caps already hold for every process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from awa_django.concurrency.limits import QueueLimitsLike
from awa_django.concurrency.validation import validate_capacity
from awa_django.exceptions import ConfigurationError

Q = TypeVar("Q", bound=QueueLimitsLike)


def part(total: int, index: int, count: int, offset: int = 0) -> int:
    """Process ``index``'s part of ``total`` split over ``count``, the remainder's units handed out
    one per process starting at process ``offset % count``."""
    whole, remainder = divmod(total, count)
    return whole + (1 if (index - offset) % count < remainder else 0)


@dataclass(frozen=True)
class HostShare:
    """Process ``index`` (0-based) of ``count`` on one host; ``global_max_workers`` is the host's."""

    index: int
    count: int
    global_max_workers: int | None

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ConfigurationError(f"process {self.index} of {self.count}: use an index from 0 to count - 1")

    @property
    def global_part(self) -> int | None:
        if self.global_max_workers is None:
            return None
        return part(self.global_max_workers, self.index, self.count)

    def queues(self, queues: Mapping[str, Q]) -> dict[str, Q]:
        """This process's part of each queue's limits; raises ConfigurationError (naming the value
        and the fix) for host settings that break the rules, or a hard-reserved queue too small
        to give each process a slot."""
        validate_capacity(self.global_max_workers, queues)  # the host's numbers, before splitting
        weighted = self.global_max_workers is not None
        if self.global_max_workers is not None and self.global_max_workers < self.count:
            raise ConfigurationError(
                f"global_max_workers={self.global_max_workers} is fewer than the {self.count} worker processes of "
                f"--processes {self.count}, which each need a slot of it; raise it to at least {self.count}, "
                "or run fewer processes"
            )
        out: dict[str, Q] = {}
        floor_units = 0  # remainder units handed out so far, across queues
        burst_units = 0
        for name in sorted(queues):
            limits = queues[name]
            changes: dict[str, object] = {}
            if weighted:
                changes["min_workers"] = part(limits.min_workers, self.index, self.count, floor_units)
                floor_units += limits.min_workers % self.count
            else:
                if limits.max_workers < self.count:
                    raise ConfigurationError(
                        f"queue {name!r} has max_workers={limits.max_workers}, fewer than the {self.count} worker "
                        f"processes of --processes {self.count}, which each need a slot of it; raise its "
                        f"max_workers to at least {self.count}, run fewer processes, or use capacity scope "
                        "'cluster'"
                    )
                changes["max_workers"] = part(limits.max_workers, self.index, self.count, floor_units)
                floor_units += limits.max_workers % self.count
            if limits.rate_limit is not None and self.count > 1:
                changes["rate_limit"] = limits.rate_limit / self.count
                # The burst in force is split, the default one (0: ceil(rate_limit)) too: left at 0,
                # each process's bucket took ceil(rate_limit / N), and 10/s over 4 processes ran 12
                # at once. A burst below N still gives each process one (no bucket holds 0).
                burst = limits.rate_burst or math.ceil(limits.rate_limit)
                changes["rate_burst"] = max(1, part(burst, self.index, self.count, burst_units))
                burst_units += burst % self.count
            out[name] = replace(limits, **changes)  # type: ignore[type-var]
        validate_capacity(self.global_part, out)
        return out
