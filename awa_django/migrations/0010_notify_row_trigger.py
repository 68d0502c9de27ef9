"""Wake-ups for inserted jobs: a row trigger that fires only for available rows, and COPY's own NOTIFY.

The statement trigger of 0002 captured every inserted row in a transition table and ran a query
over it, for every insert: about a quarter of a one-job ``enqueue`` statement's time. This row
trigger's ``WHEN`` is evaluated inline, so a scheduled row costs nothing and an available row one
``pg_notify``, which Postgres folds to one notification per queue per transaction and delivers at
commit, as before. Every insert path (enqueue, the ORM, plain SQL, COPY) still wakes the workers.

A bulk insert would pay that call per row, so ``enqueue_many`` sets ``awa.notify_by_caller`` for
the duration of its COPY (``set_config(..., true)``: transaction-local, and undone with the
savepoint if the COPY fails), sends one ``pg_notify`` per queue itself in the same transaction,
and resets it; the trigger skips the rows while it is set.
"""

from django.db import migrations

FORWARD = """
DROP TRIGGER awa_job_notify_insert ON awa_job;
DROP FUNCTION awa_notify_jobs_inserted();

CREATE FUNCTION awa_notify_job_available() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('awa_jobs', NEW.queue);
    RETURN NULL;
END
$$;

CREATE TRIGGER awa_job_notify_insert
AFTER INSERT ON awa_job
FOR EACH ROW
WHEN (NEW.state = 'available' AND current_setting('awa.notify_by_caller', true) IS DISTINCT FROM 'on')
EXECUTE FUNCTION awa_notify_job_available();
"""

BACKWARD = """
DROP TRIGGER awa_job_notify_insert ON awa_job;
DROP FUNCTION awa_notify_job_available();

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
"""


class Migration(migrations.Migration):
    dependencies = [("awa", "0009_verbose_names")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
