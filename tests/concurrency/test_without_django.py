"""The concurrency package is pure: it imports, and works, in a process where Django cannot load.

Each case runs a fresh interpreter with a meta path finder that refuses ``django`` and its
submodules, so an import of Django anywhere on the way (``awa_django/__init__``, the exceptions,
the defaults) fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import awa_django

ROOT = Path(__file__).resolve().parents[2]

BLOCK_DJANGO = textwrap.dedent(
    """
    import sys

    class BlockDjango:
        def find_spec(self, name, path=None, target=None):
            if name == "django" or name.startswith("django."):
                raise ImportError(f"django is blocked in this process ({name})")
            return None

    for name in [m for m in sys.modules if m == "django" or m.startswith("django.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, BlockDjango())
    """
)


def run_without_django(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-c", BLOCK_DJANGO + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


@pytest.mark.subprocess
def test_import_concurrency__works_where_django_cannot_be_imported() -> None:
    result = run_without_django(
        """
        from awa_django.concurrency import Allocator, QueueLimits, TokenBucket, validate_capacity

        validate_capacity(10, {"a": QueueLimits(min_workers=2), "b": QueueLimits()})
        allocator = Allocator(10, {"a": QueueLimits(min_workers=2), "b": QueueLimits()}, clock=lambda: 0.0)
        permits = allocator.try_acquire("a", 12)
        bucket = TokenBucket(5.0)
        loaded = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
        print(len(permits), bucket.burst, loaded)
        """
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["10", "5", "[]"]


@pytest.mark.subprocess
def test_import_registry__needs_django_so_the_block_is_real() -> None:
    # The control: the same process setup refuses a module that does need Django.
    result = run_without_django("import awa_django.registry")

    assert result.returncode == 1
    assert "django is blocked in this process" in result.stderr


def test_public_names__load_on_first_use() -> None:
    from awa_django.registry import job

    assert awa_django.job is job
    assert set(awa_django.__all__) <= set(dir(awa_django))
    for name in awa_django.__all__:
        assert getattr(awa_django, name) is not None


def test_public_names__an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'enqueue'"):
        awa_django.enqueue  # noqa: B018 - the lookup is the test
