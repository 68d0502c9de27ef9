"""Autovacuum settings for awa_job, the queue's hot table (docs/storage.md).

Every job is updated at least twice (claimed, then finalised) and most updates are not HOT (they
change indexed columns), so dead row versions and index entries pile up at the queue's rate. The
defaults vacuum a table once a fifth of it is dead; for a queue table that is far too late: claims,
rescues and probes walk what vacuum has not removed. These make autovacuum come early and often,
and work without sleeping on a table that is small when kept clean:

- vacuum after 1,000 dead rows + 1 % of the table (default 50 + 20 %), analyze after 2 % (default
  10 %): the planner's row estimates for the partial indexes stay current;
- vacuum after 1,000 inserted rows + 1 % (default 1,000 + 20 %), so bulk enqueues set the
  visibility map and freeze early;
- no cost delay (default 2 ms): vacuuming this table is short when done often;
- fillfactor 85: room on each page for a row's next version, so it stays on the page, where
  pruning can reclaim the old ones without a vacuum.

None of this helps while a transaction holds a snapshot older than the dead rows: nothing can
remove them then. The claim path does not depend on it (lane cursors, worker/lanes.py).
"""

from django.db import migrations

FORWARD = """
ALTER TABLE awa_job SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    fillfactor = 85
);
"""

BACKWARD = """
ALTER TABLE awa_job RESET (
    autovacuum_vacuum_scale_factor,
    autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor,
    autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor,
    autovacuum_vacuum_cost_delay,
    fillfactor
);
"""


class Migration(migrations.Migration):
    dependencies = [("awa", "0006_leader_lease")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
