"""Every raw SQL statement awa_django runs, one named ``.sql`` file each.

Each file's header comment states the statement's purpose, parameters, the index it relies on,
and its locking contract. Statements use named psycopg parameters (``%(name)s``) with explicit
casts; nothing is built by string formatting. ``statements`` maps a file's stem to its text
without its comment lines: that is what runs, and psycopg caches its conversion of a query's
``%(name)s`` placeholders only for texts up to 4 KiB (``claim_jobs`` with its header is 6 KiB,
and was converted again on every claim).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

_DIR = Path(__file__).resolve().parent


class _Statements(Mapping[str, str]):
    def __init__(self) -> None:
        self._texts = {
            path.stem: _without_comments(path.read_text(encoding="utf-8")) for path in sorted(_DIR.glob("*.sql"))
        }
        # claim_jobs without its `more` probe, for hard-reserved workers (claim_jobs.sql says why):
        # cut from claim_jobs' own text, so that the two claims cannot drift apart.
        self._texts["claim_jobs_unprobed"] = _without_probe(self._texts["claim_jobs"])

    def __getitem__(self, name: str) -> str:
        try:
            return self._texts[name]
        except KeyError:
            raise KeyError(f"no SQL statement named {name!r}; known: {', '.join(self._texts)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)


def _without_comments(text: str) -> str:
    """The statement without its whole-line ``--`` comments (the statements quote no such line)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--")) + "\n"


# claim_jobs' probe: its CTEs from `ends` to the UPDATE, and the column that reads them.
_PROBE_START, _PROBE_END = "), ends AS (", "UPDATE awa_job AS j"
_PROBED_MORE, _UNKNOWN_MORE = "(SELECT more FROM more) AS more", "NULL::boolean AS more"


def _without_probe(claim: str) -> str:
    """claim_jobs' text without its probe CTEs, its ``more`` column NULL (unknown)."""
    start, end = claim.find(_PROBE_START), claim.find(_PROBE_END)
    if not 0 <= start < end or claim.count(_PROBED_MORE) != 1:
        raise RuntimeError("claim_jobs.sql: its probe (`ends`, `more`) is not where claim_jobs_unprobed cuts it out")
    return (claim[:start] + ")\n" + claim[end:]).replace(_PROBED_MORE, _UNKNOWN_MORE)


statements = _Statements()

# LISTEN/NOTIFY channels. One for "jobs became available" (payload: the queue name, so Postgres
# folds repeats into one notification per queue per transaction) and one for Queue edits.
JOBS_CHANNEL = "awa_jobs"
QUEUES_CHANNEL = "awa_queues"
# Cancellation of running jobs: payload the job id; the worker holding it tells its handler.
CANCEL_CHANNEL = "awa_cancel"
# A job someone awaits (awa_job_waiter) ended: payload the job id (awa_release_jobs sends it).
DONE_CHANNEL = "awa_done"
# Attempts of capped fair keys ended: payload the JSON array [queue, key] (notify_freed_keys); a
# worker whose keyed claims that key's cap held back claims again.
FREED_KEYS_CHANNEL = "awa_freed_keys"
# The LISTEN connection's health check: it NOTIFYs itself here and expects the echo back in time.
LISTEN_PING_CHANNEL = "awa_listen_ping"
