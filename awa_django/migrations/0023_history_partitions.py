"""Finished jobs leave the hot table: ``awa_job_done``, partitioned by finish time (issue 43).

- ``awa_job`` keeps what claims, completions, retries and enqueues touch: waiting, scheduled,
  available, running and retryable jobs. One exception: a unique job that finished in one of its
  own ``unique_states`` keeps its key reserved, and the reservation is the hot table's unique
  index, so that row stays hot until retention deletes it (uniqueness across states keeps its
  guarantee without a second place to look; docs/storage.md).
- ``awa_job_done``: every other finished job, with the same columns in the same order. LIST
  partitioned by state into ``awa_job_done_completed`` and ``awa_job_done_failed`` (failed and
  cancelled, kept longer), each RANGE partitioned by ``finalized_at``. The leader creates the
  range partitions ahead and drops whole ones past the retention (awa_django/history_storage.py);
  each branch has a DEFAULT partition so that a job finishing where no range exists yet is never
  refused. The console's search indexes live here alone.
- ``awa_job_all``: the view both together, which the model ``Job`` reads, so a job's id is valid
  from enqueue until retention for every reader. Writes through the model go to the right table
  by INSTEAD OF triggers.
- A hot row written into a finished state by anything but the hot path's own statements (which
  move their rows themselves: complete_jobs, finalize_jobs) is moved by the trigger
  ``awa_job_move_finished``: rescue, cancel, a workflow's cancelled dependents, a worker of the
  previous release still running during a deploy, or hand-written SQL.

Upgrade in place: nothing here reads or rewrites the existing rows. The new tables are empty, the
trigger and view are catalog changes (a SHARE ROW EXCLUSIVE lock on ``awa_job`` for the trigger,
held for milliseconds), all in one transaction. The finished rows already in ``awa_job`` stay
there, visible through the view, and leave with the retention's bounded sweep; migration 0024
drops the finished-only indexes on ``awa_job`` CONCURRENTLY.

A later migration that adds a column to ``awa_job`` must add it to ``awa_job_done`` in the same
position (last) and recreate the view: the triggers move whole rows (tests/test_storage.py checks
the two tables agree).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

COLUMNS = (
    "id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, heartbeat_at, "
    "deadline_at, finalized_at, created_at, errors, metadata, tags, progress, unique_key, unique_states, "
    "run_lease, result, timeout, fair_key, pending, workflow_id, attempted_by"
)
_NAMES = [name.strip() for name in COLUMNS.split(",")]
_NEW = ", ".join(f"NEW.{name}" for name in _NAMES)

# A finished row stays hot only while it holds its unique key (its final state is one of its own
# unique_states): awa_job_unique_key_uniq then still covers it.
FINISHED = "('completed', 'failed', 'cancelled')"

_CREATE = """
CREATE TABLE awa_job_done (LIKE awa_job INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY LIST (state);
ALTER TABLE awa_job_done ADD CONSTRAINT awa_job_done_finished CHECK (state IN {FINISHED});
CREATE TABLE awa_job_done_completed PARTITION OF awa_job_done FOR VALUES IN ('completed')
    PARTITION BY RANGE (finalized_at);
CREATE TABLE awa_job_done_failed PARTITION OF awa_job_done FOR VALUES IN ('failed', 'cancelled')
    PARTITION BY RANGE (finalized_at);
CREATE TABLE awa_job_done_completed_default PARTITION OF awa_job_done_completed DEFAULT;
CREATE TABLE awa_job_done_failed_default PARTITION OF awa_job_done_failed DEFAULT;
ALTER TABLE awa_job_done_completed_default SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE awa_job_done_failed_default SET (autovacuum_vacuum_scale_factor = 0.02);

-- By id: Job.objects.get(id=...), job.wait(), the admin's links, the job list newest first.
CREATE INDEX awa_job_done_id_idx ON awa_job_done (id);
-- The history rollup's minutes and the time filters, inside each partition.
CREATE INDEX awa_job_done_finalized_idx ON awa_job_done (finalized_at);
-- The job list of one queue, newest first.
CREATE INDEX awa_job_done_queue_idx ON awa_job_done (queue, id);
-- The console's search by args and by tag (admin/search.py).
CREATE INDEX awa_job_done_args_idx ON awa_job_done USING gin (args jsonb_path_ops);
CREATE INDEX awa_job_done_tags_idx ON awa_job_done USING gin (tags);
-- The fair-key filter and the key: search (jobs with a key only), newest first.
CREATE INDEX awa_job_done_fair_key_idx ON awa_job_done (fair_key, id) WHERE fair_key <> '';
-- The created_at time filter (bench/console.py: 1.6 s to 0.6 s at 5.5 M rows).
CREATE INDEX awa_job_done_created_idx ON awa_job_done (created_at);
-- A workflow's finished jobs (its graph, retention of its edges).
CREATE INDEX awa_job_done_workflow_idx ON awa_job_done (workflow_id, id) WHERE workflow_id IS NOT NULL;

CREATE VIEW awa_job_all AS
    SELECT {COLUMNS} FROM awa_job
    UNION ALL
    SELECT {COLUMNS} FROM awa_job_done;
-- What an INSERT through the view leaves out gets the hot table's defaults.
ALTER VIEW awa_job_all ALTER COLUMN id SET DEFAULT nextval(pg_get_serial_sequence('awa_job', 'id'));
ALTER VIEW awa_job_all ALTER COLUMN fair_key SET DEFAULT '';
ALTER VIEW awa_job_all ALTER COLUMN pending SET DEFAULT 0;

-- A hot row written into a finished state moves to awa_job_done, unless it keeps its unique key.
CREATE FUNCTION awa_job_move_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM awa_job WHERE id = NEW.id;
    NEW.finalized_at := coalesce(NEW.finalized_at, now());
    INSERT INTO awa_job_done ({COLUMNS}) VALUES ({_NEW});
    RETURN NULL;
END
$$;
CREATE TRIGGER awa_job_move_finished
    AFTER INSERT OR UPDATE OF state ON awa_job
    FOR EACH ROW
    WHEN (NEW.state IN {FINISHED}
          AND NOT (NEW.unique_key IS NOT NULL AND NEW.state = ANY(NEW.unique_states)))
    EXECUTE FUNCTION awa_job_move_finished();

-- Writes through the view (the model Job): to the table that holds the row, or should.
CREATE FUNCTION awa_job_all_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO awa_job ({COLUMNS}) VALUES ({_NEW});
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        IF NEW.id IS DISTINCT FROM OLD.id THEN
            RAISE EXCEPTION 'a job''s id cannot change (job % to %)', OLD.id, NEW.id
                USING ERRCODE = 'check_violation', HINT = 'enqueue a new job instead';
        END IF;
        UPDATE awa_job SET ({COLUMNS}) = ROW({_NEW}) WHERE id = OLD.id;
        IF FOUND THEN
            RETURN NEW;
        END IF;
        IF NEW.state IN {FINISHED} AND NOT (NEW.unique_key IS NOT NULL AND NEW.state = ANY(NEW.unique_states)) THEN
            UPDATE awa_job_done SET ({COLUMNS}) = ROW({_NEW}) WHERE id = OLD.id;
        ELSE
            -- Back to the hot table: a retry, or a finished job that now holds its unique key.
            DELETE FROM awa_job_done WHERE id = OLD.id;
            IF FOUND THEN
                INSERT INTO awa_job ({COLUMNS}) VALUES ({_NEW});
            END IF;
        END IF;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        RETURN NEW;
    ELSE
        DELETE FROM awa_job WHERE id = OLD.id;
        IF NOT FOUND THEN
            DELETE FROM awa_job_done WHERE id = OLD.id;
        END IF;
        RETURN OLD;
    END IF;
END
$$;
CREATE TRIGGER awa_job_all_write
    INSTEAD OF INSERT OR UPDATE OR DELETE ON awa_job_all
    FOR EACH ROW EXECUTE FUNCTION awa_job_all_write();
"""
CREATE = _CREATE.replace("{COLUMNS}", COLUMNS).replace("{_NEW}", _NEW).replace("{FINISHED}", FINISHED)

DROP = """
DROP VIEW awa_job_all;
DROP FUNCTION awa_job_all_write();
DROP TRIGGER awa_job_move_finished ON awa_job;
DROP FUNCTION awa_job_move_finished();
INSERT INTO awa_job SELECT * FROM awa_job_done;
DROP TABLE awa_job_done;
"""

# The console's error:TEXT search (migration 0021's expression), on the failed branch, where
# pg_trgm is installed.
ERROR_TEXT = (
    "CREATE INDEX IF NOT EXISTS awa_job_done_error_text_idx ON awa_job_done_failed USING gin "
    "(upper((jsonb_path_query_array(errors, '$[*].error'::jsonpath))::text) gin_trgm_ops) WHERE errors IS NOT NULL"
)


def error_text_index(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        if cursor.fetchone() is not None:
            cursor.execute(ERROR_TEXT)


class Migration(migrations.Migration):
    # One transaction: interrupted, it leaves nothing behind, and runs again whole. The
    # finished-only indexes of awa_job are dropped CONCURRENTLY by 0024, outside it.
    atomic = True

    dependencies = [
        ("awa", "0022_fair_key_overrides"),
    ]

    operations = [
        # Lists of one script each: Django runs each as given, not split by sqlparse (whose
        # reading of the $$ bodies this must not depend on).
        migrations.RunSQL([CREATE], [DROP]),
        migrations.RunPython(error_text_index, migrations.RunPython.noop),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterModelTable(name="job", table="awa_job_all"),
                migrations.RemoveIndex(model_name="job", name="awa_job_args_idx"),
                migrations.RemoveIndex(model_name="job", name="awa_job_tags_idx"),
                migrations.RemoveIndex(model_name="job", name="awa_job_failed_tags_idx"),
                migrations.RemoveIndex(model_name="job", name="awa_job_failed_queue_idx"),
                # The two tables under the view, known to Django so that its flush empties them.
                migrations.CreateModel(
                    name="JobTable",
                    fields=[("id", models.BigAutoField(primary_key=True, serialize=False))],
                    options={"db_table": "awa_job", "default_permissions": ()},
                ),
                migrations.CreateModel(
                    name="FinishedJobTable",
                    fields=[("id", models.BigAutoField(primary_key=True, serialize=False))],
                    options={"db_table": "awa_job_done", "default_permissions": ()},
                ),
            ],
        ),
    ]
