"""The helpers in Django's own test classes: TestCase (one transaction per test, never committed)
and TransactionTestCase (real commits, tables flushed after), around a view that enqueues in
``transaction.atomic()``."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core import mail
from django.test import TestCase, TransactionTestCase

from awa_django.models import Job
from awa_django.testing import JobsFailedError, assert_enqueued, assert_not_enqueued, run_jobs
from testproject.demo.models import Execution
from tests.testing import jobs  # noqa: F401  (registers the testing.* handlers)


class SignupFlow:
    """The same checks under both test classes."""

    def test_view_enqueues_then_run_jobs_runs_the_real_handler(self) -> None:
        response = self.client.post("/demo/signup/", {"email": "ada@example.com"})  # type: ignore[attr-defined]
        user_id = response.json()["user_id"]
        [job] = assert_enqueued("send_welcome", args={"user_id": user_id}, queue="emails", count=1)
        assert mail.outbox == []

        report = run_jobs()

        assert [(run.job_id, run.state, run.result) for run in report] == [(job.pk, "completed", "ada@example.com")]
        assert [message.to for message in mail.outbox] == [["ada@example.com"]]
        assert get_user_model().objects.filter(pk=user_id).exists()
        job.refresh_from_db()
        assert job.state == "completed"
        assert_not_enqueued("send_welcome")

    def test_sync_and_async_handlers_write_in_the_tests_database(self) -> None:
        sync_job = Job.objects.enqueue("testing.touch")
        async_job = Job.objects.enqueue("testing.touch_async")
        report = run_jobs()
        assert sorted(Execution.objects.values_list("job_id", flat=True)) == [sync_job.pk, async_job.pk]
        assert [run.result for run in report] == [
            Execution.objects.get(job_id=sync_job.pk).pk,
            Execution.objects.get(job_id=async_job.pk).pk,
        ]

    def test_failures_raise_and_retries_are_reported(self) -> None:
        job = Job.objects.enqueue("testing.flaky", {"fail_attempts": 1})
        try:
            run_jobs()
        except JobsFailedError as exc:
            assert [run.state for run in exc.report] == ["retryable"]
        else:
            raise AssertionError("run_jobs() did not raise for a failing job")
        job.refresh_from_db()
        assert (job.state, job.attempt) == ("retryable", 1)

    def test_a_job_enqueuing_another(self) -> None:
        Job.objects.enqueue("testing.parent", {"children": 2})
        assert run_jobs().kinds == ["testing.parent", "testing.add", "testing.add"]
        assert set(Job.objects.values_list("state", flat=True)) == {"completed"}

    def test_bulk_enqueued_jobs_run(self) -> None:
        # enqueue_many stamps run_at with the client's clock, later than a TestCase transaction's now()
        Job.objects.enqueue_many([{"kind": "testing.add", "args": {"a": i, "b": 10}} for i in range(3)])
        assert [run.result for run in run_jobs()] == [10, 11, 12]


class InTestCase(SignupFlow, TestCase):
    pass


class InTransactionTestCase(SignupFlow, TransactionTestCase):
    pass
