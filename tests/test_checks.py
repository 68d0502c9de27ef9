"""System checks: each bad configuration gets its stable id and a hint that names the fix."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import Error, Warning, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from awa_django.checks import check_postgres, check_postgres_app, check_settings
from awa_django.conf import InvalidSettingsError, awa_settings

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")

SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}


def with_alias(alias: str, config: dict[str, Any]) -> dict[str, Any]:
    return {**settings.DATABASES, alias: config}


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def test_checks__default_testproject_settings_are_clean() -> None:
    assert check_postgres() == []
    assert check_settings() == []


def test_check_postgres__non_postgres_jobs_alias_is_e001_with_a_hint() -> None:
    with override_settings(DATABASES=with_alias("legacy", SQLITE), AWA={"DATABASE_ALIAS": "legacy"}):
        messages = check_postgres()

    assert ids(messages) == ["awa.E001"]
    (error,) = messages
    assert isinstance(error, Error)
    assert error.obj == "legacy"
    assert "'legacy'" in error.msg
    assert "'django.db.backends.sqlite3'" in error.msg
    assert "PostgreSQL" in error.msg
    assert error.hint is not None
    assert "django.db.backends.postgresql" in error.hint
    assert "['default']" in error.hint  # the Postgres alias it could use instead


def test_check_postgres__non_postgres_alias_beside_the_jobs_is_fine() -> None:
    with override_settings(DATABASES=with_alias("legacy", SQLITE)):
        assert check_postgres() == []


@pytest.mark.parametrize("engine", ["django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"])
def test_check_postgres__postgres_engines_pass(engine: str) -> None:
    with override_settings(DATABASES=with_alias("jobs", {**SQLITE, "ENGINE": engine}), AWA={"DATABASE_ALIAS": "jobs"}):
        assert check_postgres() == []


def test_check_postgres__e001_is_reported_by_django_run_checks() -> None:
    with override_settings(DATABASES=with_alias("legacy", SQLITE), AWA={"DATABASE_ALIAS": "legacy"}):
        messages = [m for m in run_checks() if m.id and m.id.startswith("awa.")]

    assert "awa.E001" in ids(messages)


@override_settings(AWA={"DATABASE_ALIAS": "jobs"})
def test_check_postgres__unknown_database_alias_is_e002() -> None:
    messages = check_postgres()

    assert ids(messages) == ["awa.E002"]
    assert "'jobs'" in messages[0].msg
    assert messages[0].hint == "use one of ['default']"


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://awa@db-host:99999/jobs", "99999"),
        ("host=db-host port=5432x dbname=jobs", "5432x"),
        ("postgresql://awa@db-host/jobs?connect_timeout=soon", "soon"),
        ("postgresql://awa@db-host/jobs?sslmode=required", "required"),
    ],
)
def test_check_settings__listen_url_libpq_cannot_use__e013_naming_the_value(url: str, named: str) -> None:
    """libpq parses these (conninfo_to_dict), then refuses them at every connection: the worker
    retried a LISTEN it could never open, forever, polling instead ('connection is bad: invalid port
    number'); a connect_timeout it could not read (a ProgrammingError, not a transient error) killed
    the listener's task and stopped the worker with a failure."""
    with override_settings(AWA={"LISTEN_DATABASE_URL": url}):
        messages = check_settings()
    assert ids(messages) == ["awa.E013"]
    assert named in messages[0].msg
    assert messages[0].hint is not None and "postgresql://" in messages[0].hint


def test_check_settings__listen_url_libpq_takes__passes() -> None:
    url = "postgresql://awa:secret@db-a:5432,db-b:6432/jobs?sslmode=verify-full&connect_timeout=5"
    with override_settings(AWA={"LISTEN_DATABASE_URL": url, "LISTEN": True}):
        assert check_settings() == []


@override_settings(AWA={"DATABASE_ALIAS": "jobz"})  # a typo of "jobs"
def test_database_alias_not_in_databases__code_reading_the_settings_gets_invalid_settings_error() -> None:
    """settings.md: code that reads the settings while one is bad gets InvalidSettingsError naming it
    and its id. An alias missing from DATABASES was accepted: a web process (gunicorn runs no system
    checks) got Django's "The connection 'jobz' doesn't exist." from every enqueue, naming neither the
    AWA setting nor the aliases there are."""
    from awa_django.models import Job

    with pytest.raises(InvalidSettingsError) as raised:
        Job.objects.enqueue("noop", {})
    assert "AWA['DATABASE_ALIAS'] is 'jobz'" in str(raised.value)
    assert "['default']" in str(raised.value)
    assert "[awa.E002]" in str(raised.value)
    assert ids(check_postgres()) == ["awa.E002"]  # the check says it once, as before
    assert "awa.E002" not in ids(check_settings())


@pytest.mark.parametrize("key", ["POLL_INTERVAL", "HEARTBEAT_INTERVAL", "HEARTBEAT_STALENESS", "SHUTDOWN_TIMEOUT"])
@pytest.mark.parametrize("value", [0, -1, "5", True, None])
def test_check_settings__non_positive_or_non_numeric_interval_is_e003(key: str, value: object) -> None:
    with override_settings(AWA={key: value}):
        messages = check_settings()

    assert ids(messages) == ["awa.E003"]
    assert f"AWA[{key!r}] is {value!r}" in messages[0].msg
    assert "above 0" in messages[0].msg
    assert messages[0].hint is not None
    assert key in messages[0].hint


@pytest.mark.parametrize("value", [0, -4, True, 2.5, "40"])
def test_check_settings__bad_global_max_workers_is_e004(value: object) -> None:
    with override_settings(AWA={"GLOBAL_MAX_WORKERS": value}):
        messages = check_settings()

    assert ids(messages) == ["awa.E004"]
    assert f"AWA['GLOBAL_MAX_WORKERS'] is {value!r}" in messages[0].msg
    assert "at least 1" in messages[0].msg
    assert messages[0].hint


def test_check_settings__global_max_workers_past_the_columns_that_hold_it__e004_naming_the_limit() -> None:
    """A worker's snapshot (WorkerInstance.global_max_workers) and its cluster report hold the global
    maximum in an integer column: 3,000,000,000 ("no limit, really") passed the check, then every
    snapshot write failed (integer out of range), so the worker never showed as live (awa_health
    unhealthy, the admin without it)."""
    with override_settings(AWA={"GLOBAL_MAX_WORKERS": 3_000_000_000}):
        messages = check_settings()
    assert ids(messages) == ["awa.E004"]
    assert "3000000000" in messages[0].msg
    assert "2147483647" in messages[0].msg
    with override_settings(AWA={"GLOBAL_MAX_WORKERS": 2_147_483_647}):
        assert check_settings() == []


def test_check_settings__unknown_key_is_w001_naming_it() -> None:
    with override_settings(AWA={"GLOBAL_MAX_WORKER": 40}):  # a typo of GLOBAL_MAX_WORKERS
        messages = check_settings()

    assert ids(messages) == ["awa.W001"]
    assert isinstance(messages[0], Warning)
    assert "'GLOBAL_MAX_WORKER'" in messages[0].msg
    assert messages[0].hint is not None
    assert "GLOBAL_MAX_WORKERS" in messages[0].hint


def test_check_settings__keys_that_are_not_strings__w001_each_not_a_crash() -> None:
    """A key written as a name's value (AWA = {POLL: 1} where POLL = 1, or an enum) beside a
    string key: the unknown keys were sorted together, and `manage.py check` died with a TypeError
    ('<' not supported between 'int' and 'str') instead of naming them."""
    with override_settings(AWA={1: 2, None: 3, "POLL_INTERVAL": 0.5, "BOGUS": 4}):
        messages = check_settings()
        assert ids(messages) == ["awa.W001"] * 3
        assert {m.msg.split(" is not")[0] for m in messages} == {"AWA[1]", "AWA[None]", "AWA['BOGUS']"}
        assert awa_settings().POLL_INTERVAL == 0.5  # unknown keys are only a warning


@override_settings(AWA={"GLOBAL_MAX_WORKERS": 40, "POLL_INTERVAL": 0.25, "HEARTBEAT_INTERVAL": 2})
def test_check_settings__valid_settings_pass() -> None:
    assert check_settings() == []


@override_settings(AWA={"GLOBAL_MAX_WORKERS": 0, "POLL_INTERVAL": -1, "BOGUS": 1})
def test_check_settings__reports_every_problem_at_once() -> None:
    assert sorted(ids(check_settings())) == ["awa.E003", "awa.E004", "awa.W001"]


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("SYNC_THREADS", 0, "awa.E006"),
        ("POOL_SIZE", "4", "awa.E006"),
        ("MAX_TAGS", -1, "awa.E006"),
        ("COMPLETED_RETENTION", 0, "awa.E007"),
        ("FAILED_RETENTION", "7d", "awa.E007"),
        # Past what a timedelta or now() - retention holds, or under a second (a timedelta of 0):
        ("COMPLETED_RETENTION", 1e20, "awa.E007"),
        ("COMPLETED_RETENTION", 1e11, "awa.E007"),
        ("COMPLETED_RETENTION", timedelta.max, "awa.E007"),
        ("FAILED_RETENTION", 1e-9, "awa.E007"),
        ("HEARTBEAT_STALENESS", 1e12, "awa.E003"),
        ("HEARTBEAT_STALENESS", 1e15, "awa.E003"),
        ("POLL_INTERVAL", 4e9, "awa.E003"),
    ],
)
def test_check_settings__bad_sizes_and_retention_are_errors(key: str, value: object, check_id: str) -> None:
    with override_settings(AWA={key: value}):
        messages = [m for m in check_settings() if m.id == check_id]
    assert len(messages) == 1
    assert repr(value) in messages[0].msg and key in messages[0].msg
    assert messages[0].hint


def without_postgres_app() -> list[str]:
    return [app for app in settings.INSTALLED_APPS if app != "django.contrib.postgres"]


def test_check_postgres_app__installed_is_clean() -> None:
    assert check_postgres_app() == []


def test_check_postgres_app__missing_is_e016_naming_the_app_and_the_line_to_add() -> None:
    with override_settings(INSTALLED_APPS=without_postgres_app()):
        messages = check_postgres_app()
        reported = [m for m in run_checks() if m.id == "awa.E016"]  # registered: `manage.py check` says it too

    assert ids(messages) == ["awa.E016"]
    (error,) = messages
    assert isinstance(error, Error)
    assert "'django.contrib.postgres' is not in INSTALLED_APPS" in error.msg
    assert "ArrayField" in error.msg and "GinIndex" in error.msg
    assert error.hint == 'add it before awa_django: INSTALLED_APPS = [..., "django.contrib.postgres", "awa_django"]'
    assert ids(reported) == ["awa.E016"]


@pytest.mark.parametrize("value", [["GLOBAL_MAX_WORKERS", 40], [("GLOBAL_MAX_WORKERS", 40)], (), "GLOBAL_MAX_WORKERS"])
def test_check_settings__awa_not_a_dict_is_e017_naming_the_type(value: object) -> None:
    """A list (even one of pairs, which dict() would take), a tuple or a string: not a dict."""
    out = StringIO()
    with override_settings(AWA=value):
        messages = check_settings()
        with pytest.raises(SystemCheckError) as caught:
            call_command("check", stdout=out, stderr=out)
        with pytest.raises(InvalidSettingsError) as raised:
            awa_settings()

    assert ids(messages) == ["awa.E017"]
    assert f"settings.AWA is a {type(value).__name__} (" in messages[0].msg
    assert "it must be a dict" in messages[0].msg
    assert messages[0].hint is not None and "AWA = {" in messages[0].hint
    assert "awa.E017" in str(caught.value) and f"settings.AWA is a {type(value).__name__}" in str(caught.value)
    assert "[awa.E017]" in str(raised.value)


@pytest.mark.parametrize("value", [None, {}])
def test_check_settings__awa_none_or_empty_is_the_defaults(value: object) -> None:
    with override_settings(AWA=value):
        assert check_settings() == []


@pytest.mark.parametrize(
    "awa",
    [{"HEARTBEAT_INTERVAL": 60}, {"HEARTBEAT_INTERVAL": 10, "HEARTBEAT_STALENESS": 10}],
)
def test_check_settings__a_heartbeat_staleness_not_above_the_interval_is_e018(awa: dict[str, Any]) -> None:
    """Each value passes its own rule (awa.E003), but awa_worker refuses the pair at start
    ('heartbeat_staleness must exceed heartbeat_interval, or live jobs would be rescued'): a deploy
    gated on `manage.py check` shipped workers that could not start. The check says it first."""
    with override_settings(AWA=awa):
        messages = check_settings()
    assert ids(messages) == ["awa.E018"]
    (error,) = messages
    assert "HEARTBEAT_STALENESS" in error.msg and "HEARTBEAT_INTERVAL" in error.msg
    assert error.hint is not None and "HEARTBEAT_STALENESS" in error.hint
