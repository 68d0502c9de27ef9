"""Deadlocks between enqueues of unique jobs: the error a caller gets, and how an enqueue tells one.

A unique job's key is taken by inserting its row: the partial unique index ``awa_job_unique_key_uniq``
makes a second inserter of the same key wait until the first transaction ends. Two transactions
that each hold a key the other then inserts wait for each other; Postgres' deadlock detector
aborts one of them (SQLSTATE 40P01), which Django raises as a bare ``OperationalError`` naming
two process ids. ``enqueue_many`` never starts such a cycle with another ``enqueue_many``: it
inserts its unique rows in key order (``awa_django.managers``). Single enqueues in opposite
orders in two user transactions cannot be reordered by us; their deadlock becomes a
``UniqueJobDeadlockError`` that names the keys and the fix.

The error lives here, not in ``awa_django.exceptions``: it subclasses Django's OperationalError,
and that module imports no Django (the concurrency package uses it where Django cannot load).
Import it as ``awa_django.UniqueJobDeadlockError`` or from this module.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import OperationalError
from psycopg.errors import DeadlockDetected

from awa_django.exceptions import AwaError
from awa_django.validation import brief

__all__ = ["UniqueJobDeadlockError", "unique_deadlock"]


class UniqueJobDeadlockError(AwaError, OperationalError):
    """Postgres found a deadlock while this transaction enqueued unique jobs, and aborted it.

    Another transaction holds, uncommitted, a unique key this enqueue waits for, and waits for a
    key this transaction holds: the same keys enqueued in opposite orders. ``unique_keys`` are the
    keys this enqueue was writing (sorted), ``kind`` its kind (None for ``enqueue_many``, which
    may mix kinds). The transaction (or the savepoint the enqueue ran in) is aborted: roll it
    back, then retry it, or enqueue the keys in one order everywhere.

    A subclass of ``django.db.OperationalError``, which Django raised for this before, so an
    ``except OperationalError`` or ``except DatabaseError`` (a retry-on-deadlock helper) still
    catches it; ``__cause__`` is psycopg's ``DeadlockDetected`` (``sqlstate`` 40P01), as under
    Django's own error. Not a ``UniqueJobConflictError``: no job holds the key for good, the
    other transaction may yet roll back.
    """

    def __init__(self, unique_keys: Iterable[str], *, kind: str | None = None) -> None:
        self.unique_keys = sorted(unique_keys)
        self.kind = kind
        what = f"unique job(s) of kind {kind!r}" if kind is not None else "unique jobs"
        super().__init__(
            f"deadlock while enqueuing {what} with unique key(s) {brief(self.unique_keys)}: another "
            "transaction holds, uncommitted, a key this one waits for, and waits for a key this one "
            "holds; Postgres aborted this transaction. Enqueue unique jobs in one consistent order in "
            "every transaction (sorted by unique key, or all together with enqueue_many, which takes "
            "its keys in key order), or roll back and retry the transaction"
        )


def unique_deadlock(
    error: OperationalError, unique_keys: Iterable[str], *, kind: str | None = None
) -> UniqueJobDeadlockError | None:
    """The error to raise instead of ``error``, a database error an enqueue of ``unique_keys`` got:
    a ``UniqueJobDeadlockError`` when Postgres broke a deadlock (psycopg's DeadlockDetected, the
    cause of Django's error) and the enqueue wrote unique keys; None for any other error, which
    the enqueue re-raises as it is."""
    keys = list(unique_keys)
    if not keys or not isinstance(error.__cause__, DeadlockDetected):
        return None
    return UniqueJobDeadlockError(keys, kind=kind)
