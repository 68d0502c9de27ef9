"""The shared overflow pool of weighted mode.

The allocation rule. `try_acquire(queue, wanted)` records `demand[queue] = wanted`.
A queue *contends* while its demand or its held count is above zero; the contending
weight is the sum of the contenders' weights. A queue's fair share is
`ceil(total * weight / contending_weight)`, and it is granted

    max(0, min(wanted, available, fair_share - held[queue]))

where `available = total - sum(held)`. So a sole contender may take the whole pool
(work-conserving), contending queues split it by weight, and `sum(held) <= total`.
After a `reconfigure` that shrinks the total below what is already held, the held
permits stay held and nothing is granted until the sum drops below the new total.
"""

from __future__ import annotations

from collections.abc import Mapping

from awa_django.exceptions import InvalidWeightError


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer of at least 0, got {value!r}")


def _checked_weights(weights: Mapping[str, int]) -> dict[str, int]:
    for queue, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise InvalidWeightError(queue, weight)
    return dict(weights)


class OverflowPool:
    """`total` permits shared by weighted queues; see the module docstring for the rule."""

    __slots__ = ("_demand", "_held", "_held_total", "_total", "_weights")

    def __init__(self, total: int, weights: Mapping[str, int]) -> None:
        _check_count("total", total)
        self._weights = _checked_weights(weights)
        self._total = total
        # `_held` may keep queues removed by `reconfigure` until they release everything.
        self._held: dict[str, int] = dict.fromkeys(self._weights, 0)
        self._demand: dict[str, int] = dict.fromkeys(self._weights, 0)
        self._held_total = 0

    def __repr__(self) -> str:
        return f"OverflowPool(total={self._total}, held={self._held!r}, demand={self._demand!r})"

    # --- reading -----------------------------------------------------------------

    @property
    def total(self) -> int:
        return self._total

    @property
    def held_total(self) -> int:
        return self._held_total

    @property
    def available(self) -> int:
        return max(0, self._total - self._held_total)

    @property
    def weights(self) -> dict[str, int]:
        return dict(self._weights)

    @property
    def contenders(self) -> frozenset[str]:
        """Queues whose demand or held count is above zero (and that still have a weight)."""
        return frozenset(q for q in self._weights if self._demand[q] > 0 or self._held[q] > 0)

    def held(self, queue: str) -> int:
        if queue not in self._held:
            raise self._unknown(queue)
        return self._held[queue]

    def demand(self, queue: str) -> int:
        self._check_known(queue)
        return self._demand[queue]

    def fair_share(self, queue: str) -> int:
        """The queue's share of the pool, counting it as a contender."""
        self._check_known(queue)
        weight = self._weights[queue]
        contending = sum(self._weights[q] for q in self.contenders | {queue})
        return -(-self._total * weight // contending)  # ceil without floats

    def grantable(self, queue: str) -> int:
        """What `try_acquire(queue, n)` would grant now for a large `n`, without recording demand."""
        return max(0, min(self.available, self.fair_share(queue) - self._held[queue]))

    # --- changing ----------------------------------------------------------------

    def try_acquire(self, queue: str, wanted: int) -> int:
        """Record the queue's demand and grant what the rule allows; never blocks.

        `try_acquire(queue, 0)` clears the demand: a queue holding nothing then stops
        contending.
        """
        self._check_known(queue)
        _check_count("wanted", wanted)
        self._demand[queue] = wanted
        if wanted == 0:
            return 0
        granted = max(0, min(wanted, self.available, self.fair_share(queue) - self._held[queue]))
        self._held[queue] += granted
        self._held_total += granted
        return granted

    def release(self, queue: str, n: int = 1) -> None:
        if queue not in self._held:
            raise self._unknown(queue)
        _check_count("n", n)
        held = self._held[queue]
        if n > held:
            raise ValueError(f"queue {queue!r} cannot release {n} overflow permits: it holds {held}")
        self._held[queue] = held - n
        self._held_total -= n
        if self._held[queue] == 0 and queue not in self._weights:
            del self._held[queue]

    def reconfigure(self, total: int, weights: Mapping[str, int]) -> None:
        """Change the total and the weights live; validated before anything changes.

        Permits already held stay held and are released normally; a queue removed from
        `weights` keeps its held count (it still uses up the pool) until it releases it.
        """
        _check_count("total", total)
        new_weights = _checked_weights(weights)
        self._total = total
        self._weights = new_weights
        self._demand = {q: self._demand.get(q, 0) for q in new_weights}
        for queue in new_weights:
            self._held.setdefault(queue, 0)
        for queue in [q for q, n in self._held.items() if n == 0 and q not in new_weights]:
            del self._held[queue]

    # --- helpers -----------------------------------------------------------------

    def _check_known(self, queue: str) -> None:
        if queue not in self._weights:
            raise self._unknown(queue)

    def _unknown(self, queue: str) -> KeyError:
        known = ", ".join(repr(q) for q in self._weights) or "none"
        return KeyError(f"queue {queue!r} is not in this overflow pool (its queues: {known})")
