"""The migrations match the models, and the database has the indexes, constraints and triggers they promise."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, models

from awa_django.models import Job, Queue

# Partial indexes by name: (columns, WHERE predicate as Postgres prints it). The hot-path queries
# write the state as a literal so the planner can match these predicates.
PARTIAL_INDEXES = {
    "awa_job_available_idx": ("(queue, priority, run_at, id)", "((state)::text = 'available'::text)"),
    "awa_job_key_available_idx": ("(queue, fair_key, priority, run_at, id)", "((state)::text = 'available'::text)"),
    "awa_job_key_running_idx": ("(queue, fair_key)", "((state)::text = 'running'::text)"),
    "awa_job_running_hb_idx": ("(heartbeat_at)", "((state)::text = 'running'::text)"),
    "awa_job_running_dl_idx": ("(deadline_at)", "((state)::text = 'running'::text)"),
    "awa_job_pending_run_at_idx": (
        "(run_at)",
        "((state)::text = ANY ((ARRAY['scheduled'::character varying, 'retryable'::character varying])::text[]))",
    ),
    "awa_job_finalized_idx": (
        "(state, finalized_at)",
        "((state)::text = ANY ((ARRAY['completed'::character varying, 'failed'::character varying, "
        "'cancelled'::character varying])::text[]))",
    ),
    "awa_job_workflow_idx": ("(workflow_id, id)", "(workflow_id IS NOT NULL)"),
    "awa_job_pending_queue_idx": (
        "(queue, state)",
        "((state)::text = ANY ((ARRAY['scheduled'::character varying, 'retryable'::character varying])::text[]))",
    ),
    "awa_job_waiting_idx": ("(id)", "((state)::text = 'waiting'::text)"),
    "awa_job_unique_key_uniq": (
        "(unique_key)",
        "((unique_key IS NOT NULL) AND ((state)::text = ANY ((unique_states)::text[])))",
    ),
}


def index_definitions(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_makemigrations__no_changes_detected() -> None:
    out = StringIO()

    call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=StringIO())  # SystemExit(1) if not

    assert "No changes detected" in out.getvalue()


def test_partial_indexes__every_conditional_index_in_models_is_listed_here() -> None:
    in_models = {index.name for index in Job._meta.indexes if index.condition is not None}
    in_models |= {
        c.name for c in Job._meta.constraints if isinstance(c, models.UniqueConstraint) and c.condition is not None
    }

    assert in_models == set(PARTIAL_INDEXES)


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(PARTIAL_INDEXES))
def test_partial_indexes__exist_with_their_where_predicate(name: str) -> None:
    columns, predicate = PARTIAL_INDEXES[name]

    definition = index_definitions("awa_job").get(name)

    assert definition is not None, f"index {name} is missing"
    assert definition.endswith(f"USING btree {columns} WHERE {predicate}")


@pytest.mark.django_db
def test_constraints__every_model_constraint_exists_in_the_database() -> None:
    expected = {c.name for model in (Job, Queue) for c in model._meta.constraints}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid IN ('awa_job'::regclass, 'awa_queue'::regclass)"
        )
        in_database = {row[0] for row in cursor.fetchall()}

    assert expected - {"awa_job_unique_key_uniq"} <= in_database  # the unique one is an index, checked above


@pytest.mark.django_db
def test_triggers__notify_triggers_are_installed() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname, tgrelid::regclass::text FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'awa_%%'"
        )
        triggers = set(cursor.fetchall())

    assert triggers == {
        ("awa_job_notify_insert", "awa_job"),
        ("awa_queue_notify_change", "awa_queue"),
        # Migration 0023: a finished hot row moves to awa_job_done; writes through the view.
        ("awa_job_move_finished", "awa_job"),
        ("awa_job_all_write", "awa_job_all"),
    }


@pytest.mark.django_db
def test_sqlmigrate__notify_migration_is_reversible() -> None:
    out = StringIO()

    call_command("sqlmigrate", "awa", "0002", "--backwards", stdout=out)

    backwards = out.getvalue()
    for dropped in (
        "awa_job_notify_insert",
        "awa_notify_jobs_inserted",
        "awa_queue_notify_change",
        "awa_notify_queue_changed",
    ):
        assert dropped in backwards


@pytest.mark.django_db
def test_triggers__job_insert_trigger_is_a_row_trigger_on_available_rows() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'awa_job_notify_insert'")
        (definition,) = cursor.fetchone()

    assert "AFTER INSERT ON public.awa_job FOR EACH ROW" in definition
    assert "'available'" in definition and "awa.notify_by_caller" in definition


@pytest.mark.django_db
def test_sqlmigrate__row_trigger_migration_restores_the_statement_trigger_backwards() -> None:
    out = StringIO()

    call_command("sqlmigrate", "awa", "0010", "--backwards", stdout=out)

    backwards = out.getvalue()
    assert "DROP FUNCTION awa_notify_job_available()" in backwards
    assert "REFERENCING NEW TABLE AS awa_new_jobs" in backwards
    assert "FOR EACH STATEMENT EXECUTE FUNCTION awa_notify_jobs_inserted()" in backwards
