from django.db import models


class Execution(models.Model):
    """One handler run of the ``record`` demo job: lets tests count executions per job from the
    database, also when the worker is another process."""

    job_id = models.BigIntegerField(db_index=True)
    attempt = models.IntegerField()
    run_lease = models.BigIntegerField()
    pid = models.IntegerField()
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "demo_execution"

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} (pid {self.pid})"
