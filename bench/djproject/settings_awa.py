"""awa_django under benchmark: the awa app plus the bench handlers (bench.djproject.awabench)."""

from bench.djproject.base_settings import *  # noqa: F403

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "awa_django",
    "bench.djproject.awabench",
]

# Hard-reserved mode by default (per-queue max_workers in the awa_queue table); the weighted
# fairness run passes --global-max-workers to the worker instead.
AWA: dict[str, object] = {}
