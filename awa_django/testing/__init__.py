"""Testing code that enqueues jobs: run the real jobs on the test's own rows.

Jobs are rows in the project's database, so a test can run them where they are: ``run_jobs()``
claims every due job on the test's own connection (inside ``TestCase`` and
``pytest.mark.django_db`` transactions too), runs it through the worker's executor and writes
its outcome with the worker's SQL. ``assert_enqueued`` / ``assert_not_enqueued`` /
``enqueued_jobs`` look at what is waiting. With pytest-django, the ``awa`` fixture (registered
through the ``pytest11`` entry point) offers the same, with nothing to add to a conftest.
"""

from awa_django.inline import JobRun
from awa_django.testing.assertions import WAITING_STATES, assert_enqueued, assert_not_enqueued, enqueued_jobs
from awa_django.testing.runner import MAX_RUNS, JobsFailedError, RunawayJobsError, RunReport, run_jobs

__all__ = [
    "MAX_RUNS",
    "WAITING_STATES",
    "JobRun",
    "JobsFailedError",
    "RunReport",
    "RunawayJobsError",
    "assert_enqueued",
    "assert_not_enqueued",
    "enqueued_jobs",
    "run_jobs",
]
