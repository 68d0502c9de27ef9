"""Testing a view that enqueues a job: the testing guide's example, kept verbatim (test_readme checks)."""

from django.core import mail
from django.test import TestCase

from awa_django.models import Job
from awa_django.testing import assert_enqueued, assert_not_enqueued, run_jobs


class SignupTests(TestCase):
    def test_signup_sends_a_welcome_email(self):
        response = self.client.post("/demo/signup/", {"email": "ada@example.com"})
        assert response.status_code == 201
        user_id = response.json()["user_id"]

        # The job is a row in this test's transaction: assert on it before anything runs.
        [job] = assert_enqueued("send_welcome", args={"user_id": user_id}, queue="emails")
        assert mail.outbox == []

        # Run it through the real handler, on this test's connection.
        report = run_jobs()
        assert report.kinds == ["send_welcome"]
        assert mail.outbox[0].to == ["ada@example.com"]
        job.refresh_from_db()
        assert (job.state, job.result) == ("completed", "ada@example.com")
        assert_not_enqueued("send_welcome")

    def test_a_bad_signup_enqueues_nothing(self):
        response = self.client.post("/demo/signup/", {"email": ""})
        assert response.status_code == 400
        assert_not_enqueued("send_welcome")
        assert Job.objects.count() == 0


# With pytest-django, the `awa` fixture has the same helpers (no conftest needed).
def test_signup_with_pytest(client, awa):
    response = client.post("/demo/signup/", {"email": "bob@example.com"})
    awa.assert_enqueued("send_welcome", args={"user_id": response.json()["user_id"]})
    report = awa.run_jobs()
    assert [run.result for run in report.completed] == ["bob@example.com"]
    assert len(mail.outbox) == 1
