"""Hypothesis profiles, chosen by ``HYPOTHESIS_PROFILE`` (loaded by tests/conftest.py before any
test module is imported, so every ``@settings(...)`` in the suite inherits from the profile):

* ``ci`` (the default: the README's test command, ``.ci/run``, ``.ci/flake-hunt``): the same
  examples on every run (``derandomize``), no example database, no deadline and no too-slow
  health check (a loaded machine is slow, not wrong). A red run is then a real counterexample that
  reproduces on every machine, never a new one found by chance on a fresh clone. The
  counterexamples found so far are pinned with ``@example`` next to their properties.
* ``explore``: random examples, each test's own example count, the example database kept in
  ``.hypothesis/`` (failures replay first next time). For a developer hunting new counterexamples.
* ``thorough``: random examples and ten times each test's example count (``HYPOTHESIS_SCALE``
  sets another factor): the nightly or explicit long run, ``HYPOTHESIS_PROFILE=thorough pytest``.

A counterexample that ``explore`` or ``thorough`` finds is pinned with ``@example`` in the test, so
that ``ci`` finds it from then on.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

PROFILE = "HYPOTHESIS_PROFILE"
SCALE = "HYPOTHESIS_SCALE"

# A loaded machine is slow, not wrong: no deadline, no too-slow health check, in every profile.
_RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)

settings.register_profile("ci", _RELAXED, derandomize=True, database=None)
settings.register_profile("explore", _RELAXED)
settings.register_profile("thorough", _RELAXED)


def load() -> str:
    """Load the profile ``HYPOTHESIS_PROFILE`` names (``ci`` when unset); an unknown name fails,
    naming the ones there are."""
    name = os.environ.get(PROFILE) or "ci"
    if name not in ("ci", "explore", "thorough"):
        raise pytest.UsageError(f"{PROFILE}={name!r} is not a profile; use ci, explore or thorough")
    settings.load_profile(name)
    return name


def scale() -> int:
    """How many times each test's own example count the ``thorough`` profile runs (1 otherwise)."""
    if settings.get_current_profile_name() != "thorough":
        return 1
    raw = os.environ.get(SCALE) or "10"
    if not raw.isdigit() or int(raw) < 1:
        raise pytest.UsageError(f"{SCALE}={raw!r} is not a whole number of at least 1; use e.g. {SCALE}=10")
    return int(raw)


def scale_examples(items: list[pytest.Item]) -> None:
    """Under ``thorough``, multiply each collected Hypothesis test's example count. A test's own
    ``@settings(max_examples=...)`` is kept as the ``ci`` size; its settings object is replaced by
    one derived from it (the attribute Hypothesis itself reads them from)."""
    factor = scale()
    if factor == 1:
        return
    for item in items:
        test = getattr(item, "obj", None)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is not None and not getattr(test, "_awa_scaled", False):
            test._hypothesis_internal_use_settings = settings(own, max_examples=own.max_examples * factor)  # type: ignore[union-attr]
            test._awa_scaled = True  # type: ignore[union-attr]
