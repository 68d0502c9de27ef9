"""Workflows: the release leaves alone a ``waiting`` row whose ``pending`` is 0 (a durable job parked
in a wait), as it leaves alone every row no longer waiting for its upstreams.

A job waits for its upstreams with ``pending`` > 0: it is written ``waiting`` only then, and the
release makes it available when its count reaches 0. A durable job parked in a wait
(``awa_django.durable``) is ``waiting`` too, with ``pending`` 0: its upstreams' wait is over. An
upstream of it that ends again (re-armed by ``retry_workflow``, restarted by
``restart_from_step``) reached it through its edge: 0018's release lowered its count to -1 and made
it available; it ran, found its wait still in force, parked again with ``pending`` -1, and no
signal could wake it (``signal_job`` and ``wake_signalled_jobs`` wake ``pending = 0`` only). The
two statements that change a dependent now require ``pending > 0``, as the fast path's first
update already did.

As 0018 says: a later ``CREATE OR REPLACE FUNCTION awa_release_jobs`` must repeat
``SET enable_seqscan = off``.
"""

from importlib import import_module

from django.db import migrations

PREVIOUS: str = import_module("awa_django.migrations.0027_release_precheck").RELEASE

# (the text in 0027's function, the text here): each must occur once
CHANGES = (
    (
        """            WHERE id = dependent AND state = 'waiting'
            RETURNING state, queue INTO woken_state, woken_queue;""",
        """            WHERE id = dependent AND state = 'waiting' AND pending > 0
            RETURNING state, queue INTO woken_state, woken_queue;""",
    ),
    (
        """                  AND w.state = 'waiting'
                RETURNING w.id, w.state, w.queue""",
        """                  AND w.state = 'waiting'
                  AND w.pending > 0  -- pending 0: a durable job parked in a wait, released already
                RETURNING w.id, w.state, w.queue""",
    ),
)

RELEASE = PREVIOUS
for old, new in CHANGES:
    if RELEASE.count(old) != 1:  # pragma: no cover (a guard on 0027's text, which never changes)
        raise RuntimeError("migration 0028: 0027's awa_release_jobs does not read as expected")
    RELEASE = RELEASE.replace(old, new)


class Migration(migrations.Migration):
    dependencies = [
        ("awa", "0027_release_precheck"),
    ]

    operations = [
        migrations.RunSQL(RELEASE, PREVIOUS),
    ]
