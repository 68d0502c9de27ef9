"""bench/soak.py's worker settings: the test project's, with a retention of minutes, so that the
finished jobs' partitions are a minute wide and roll over many times in a soak."""

from testproject.settings import *  # noqa: F403

AWA = {"COMPLETED_RETENTION": 120, "FAILED_RETENTION": 240}
