"""The ``awa`` pytest fixture, registered through the ``pytest11`` entry point (needs pytest-django).

::

    def test_signup(client, awa):
        client.post("/signup/", {"email": "ada@example.com"})
        awa.assert_enqueued("send_welcome")
        report = awa.run_jobs()

``awa`` requests pytest-django's ``db``, so a test using it may access the database without a
mark; ``pytest.mark.django_db(transaction=True)`` still makes it transactional.
"""

from __future__ import annotations

import pytest

from awa_django.testing import assert_enqueued, assert_not_enqueued, enqueued_jobs, run_jobs


class AwaFixture:
    """``awa_django.testing``'s helpers, on the ``awa`` fixture (the same functions, same signatures)."""

    run_jobs = staticmethod(run_jobs)
    assert_enqueued = staticmethod(assert_enqueued)
    assert_not_enqueued = staticmethod(assert_not_enqueued)
    enqueued_jobs = staticmethod(enqueued_jobs)


@pytest.fixture
def awa(db: None) -> AwaFixture:
    """Run and inspect awa_django jobs in a test: ``awa.run_jobs()``, ``awa.assert_enqueued(kind)``,
    ``awa.assert_not_enqueued(kind)``, ``awa.enqueued_jobs(kind)``."""
    return AwaFixture()
