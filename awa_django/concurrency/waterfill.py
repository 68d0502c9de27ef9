"""The weighted water-fill: one capacity shared by weight, no contender above its cap.

Both levels of fairness promise it: the overflow pool among a worker's queues
(`awa_django.concurrency.pool`) and one queue's slots among its fair keys
(`awa_django.concurrency.keys`, read back by the admin through `awa_django.services.keys`).

**The rule.** Contenders have weights (integers of at least 1) and caps (what each could use;
none for no limit). The level `L` is the largest share per unit of weight such that
`sum(min(cap, L * weight)) <= total`; each contender gets `min(cap, L * weight)`. So shares are
proportional to weight among the uncapped, a capped contender gets its cap, what it cannot use
goes to the others by weight, and the shares sum to `min(total, sum of caps)`: work-conserving,
a lone contender gets all it can use.

**How it is computed.** `water_level` walks the contenders (or groups of them with one cap per
weight, as the pool keeps them so that a decision costs O(groups), not O(contenders)) in
ascending order of cap per weight; a contender is capped while its cap is within its weighted
share of what is left. It is exact in the arithmetic it is given: integers and `Fraction`s
compare without rounding (the pool's integer floors rely on that), floats as floats.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import TypeVar

from awa_django.concurrency.validation import is_int

# What a capacity is counted in: whole slots (the pool), floats (the admin's shares in force) or
# exact fractions (the tests' models).
Amount = TypeVar("Amount", int, float, Fraction)
Share = TypeVar("Share", float, Fraction)


def water_level(total: Amount, tiers: Iterable[tuple[Amount, int]], weight: int) -> tuple[int, Amount, int]:
    """Where the water settles over ``tiers``: ``(cap, weight)`` pairs of contenders, or of groups
    with one cap per weight, in ascending order of cap per weight; ``weight`` is every contender's
    (the uncapped ones' too, who are in no tier). Returns how many leading tiers are capped (each
    gets its cap), what is left for the rest (never below zero), and the rest's weight: an
    uncapped contender of weight ``w`` gets ``left * w / rest``. O(capped tiers)."""
    left = total
    capped = 0
    for cap, tier_weight in tiers:
        if left <= 0 or cap * weight > left * tier_weight:
            break
        left -= cap
        weight -= tier_weight
        capped += 1
    return capped, max(left, total * 0), weight


def water_fill(total: Share, weights: Mapping[str, int], caps: Mapping[str, Share | None]) -> dict[str, Share]:
    """Each contender's share of ``total`` by the rule (module docstring); ``caps`` names each
    contender's cap, ``None`` (or absent) for none. O(k log k) for k contenders."""
    if not total >= 0:
        raise ValueError(f"total must be a number of at least 0, got {total!r}")
    for name, weight in weights.items():
        if not (is_int(weight) and weight >= 1):
            raise ValueError(f"weight of {name!r} must be an integer of at least 1, got {weight!r}")
    bounded: list[tuple[Share, int, str]] = []
    for name, weight in weights.items():
        cap = caps.get(name)
        if cap is not None:
            if not cap >= 0:
                raise ValueError(f"cap of {name!r} must be a number of at least 0 or None, got {cap!r}")
            bounded.append((cap, weight, name))
    bounded.sort(key=lambda tier: tier[0] / tier[1])  # the most tightly capped first
    capped, left, rest = water_level(total, ((cap, weight) for cap, weight, _ in bounded), sum(weights.values()))
    at_cap = {name: cap for cap, _, name in bounded[:capped]}
    return {name: at_cap[name] if name in at_cap else left * weight / rest for name, weight in weights.items()}
