"""Wake-ups: NOTIFY when available jobs are inserted, and when a Queue's settings change.

Statement-level triggers with a transition table: one NOTIFY per queue per statement, which
Postgres folds further to one per queue per transaction and delivers at commit. Every insert
path (enqueue, COPY, the ORM, plain SQL) wakes the workers the same way.
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION awa_notify_jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('awa_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM awa_new_jobs WHERE state = 'available') AS q;
    RETURN NULL;
END
$$;

CREATE TRIGGER awa_job_notify_insert
AFTER INSERT ON awa_job
REFERENCING NEW TABLE AS awa_new_jobs
FOR EACH STATEMENT EXECUTE FUNCTION awa_notify_jobs_inserted();

CREATE FUNCTION awa_notify_queue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('awa_queues', COALESCE(NEW.name, OLD.name));
    RETURN NULL;
END
$$;

CREATE TRIGGER awa_queue_notify_change
AFTER INSERT OR UPDATE OR DELETE ON awa_queue
FOR EACH ROW EXECUTE FUNCTION awa_notify_queue_changed();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS awa_queue_notify_change ON awa_queue;
DROP FUNCTION IF EXISTS awa_notify_queue_changed();
DROP TRIGGER IF EXISTS awa_job_notify_insert ON awa_job;
DROP FUNCTION IF EXISTS awa_notify_jobs_inserted();
"""


class Migration(migrations.Migration):
    dependencies = [("awa", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
