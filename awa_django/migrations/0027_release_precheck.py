"""Completions: ``awa_release_jobs`` returns at once when no one waits on the ended jobs and no edge
leaves them, which is every completion outside a workflow.

Each completing statement calls the function (``complete_job``, ``complete_jobs``,
``finalize_jobs``, the rescues). Its first step for a job with no edge and no waiter was two
queries over its ``ended_ids`` array: the waiters' NOTIFY, and an aggregate over the edges
(``count(DISTINCT ...)``, ``min``, ``bool_and``). plpgsql keeps a plan per query, but a query
with an array parameter is planned again at every call: Postgres compares its generic plan,
costed for an array of unknown length, with the custom plans for the arrays it was given, and
keeps choosing custom ones. Two ``EXISTS`` probes, each an index probe stopped at its first row,
cost the same in a generic plan as in a custom one, so Postgres keeps their generic plans.

The probes read what the old first step read, in a snapshot taken when the check runs (the
function is volatile), not the calling statement's: an edge or waiter committed while the
completion waited on a row lock is seen, as ``tests/workflows/test_late_edges.py`` requires.
Anything found takes the function's path as before, from its first step.

Measured with pgbench, eight clients, one atomic attempt per transaction (BEGIN, the handler's
one-row insert, ``complete_job``, COMMIT; bench/README.md "Atomic handlers: the release's
pre-check"): 4,290-4,450 transactions/s with 0019's function, 5,190-5,250 with this one.

As 0018 says: a later ``CREATE OR REPLACE FUNCTION awa_release_jobs`` must repeat
``SET enable_seqscan = off``.
"""

from importlib import import_module

from django.db import migrations

PREVIOUS: str = import_module("awa_django.migrations.0019_release_by_key").RELEASE

PRECHECK = """BEGIN
    -- No waiter and no edge (every completion outside a workflow): nothing to tell or release.
    -- Two probes whose generic plans Postgres keeps (the steps below are planned per call).
    IF NOT EXISTS (SELECT 1 FROM awa_job_waiter AS v WHERE v.job_id = ANY(ended_ids))
       AND NOT EXISTS (SELECT 1 FROM awa_job_edge AS e WHERE e.upstream_id = ANY(ended_ids)) THEN
        RETURN 0;
    END IF;
    WHILE cardinality(ended_ids) > 0 LOOP"""

OLD_START = """BEGIN
    WHILE cardinality(ended_ids) > 0 LOOP"""

if PREVIOUS.count(OLD_START) != 1:  # pragma: no cover (a guard on 0019's text, which never changes)
    raise RuntimeError("migration 0027: 0019's awa_release_jobs does not begin as expected")

RELEASE = PREVIOUS.replace(OLD_START, PRECHECK)


class Migration(migrations.Migration):
    dependencies = [
        ("awa", "0026_console_indexes"),
    ]

    operations = [
        migrations.RunSQL(RELEASE, PREVIOUS),
    ]
