"""No import circles inside awa_django, counting every import of its own modules: at the top of a
module, inside a function (it runs later) and under ``if TYPE_CHECKING:`` (it never runs, but the
module depends on the other all the same). And the web side stays a web side: a process that
serves the admin and enqueues jobs loads no ``awa_django.worker`` module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.import_graph import cycles, import_graph, import_sites

ROOT = Path(__file__).resolve().parent.parent


def test_cycles__finds_a_cycle_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    assert cycles(graph) == [["a", "b", "c"]]


def test_import_sites__tells_the_three_kinds_apart(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from pkg import b\n"
        "if TYPE_CHECKING:\n    from pkg.c import C\n"
        "def f():\n    from pkg import d\n"
    )
    for name in "bcd":
        (pkg / f"{name}.py").write_text("")

    sites = {(site.module, site.line, tuple(site.imported), site.kind) for site in import_sites(pkg)}

    assert sites == {
        ("pkg.a", 2, ("pkg.b",), "module"),
        ("pkg.a", 4, ("pkg.c",), "type_checking"),
        ("pkg.a", 6, ("pkg.d",), "function"),
    }


def test_import_graph__reads_every_kind_of_import() -> None:
    graph = import_graph()

    assert "awa_django.jobspec" in graph["awa_django.managers"]  # at the top
    assert "awa_django.checks" in graph["awa_django.apps"]  # imported inside AppConfig.ready
    assert "awa_django.worker.supervisor" in graph["awa_django.worker"]  # under TYPE_CHECKING


def test_awa_django__has_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)

    detail = [[f"{a} -> {b}" for a in component for b in sorted(graph[a] & set(component))] for component in found]
    assert found == [], f"import cycles: {detail}"


# What a web process does: django.setup() (the admin autodiscovers its modules, awa's AppConfig
# wires checks and the Tasks backends), the URLconf, the admin's pages rendered for a staff user,
# and enqueues through Job.objects, a @job handler and a Tasks framework @task, then every system
# check (manage.py check, runserver), the database ones included. All of it in one
# transaction that is rolled back, on this run's test database; a fresh interpreter, so that the
# modules this test process has loaded do not count.
WEB_PROCESS = """
import json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import get_resolver, reverse

get_resolver().url_patterns
after_setup = sorted(name for name in sys.modules if name.startswith("awa_django.worker"))
from awa_django.handlers import registry
# AppConfig.ready connected the Tasks backend's resolver: a task's kind has a handler here.
task_resolved = registry.get("testproject.demo.tasks.add") is not None
from awa_django.models import Job
from testproject.demo.jobs import send_welcome
from testproject.demo.tasks import add

with transaction.atomic():
    Job.objects.enqueue("noop", {})
    send_welcome.enqueue(user_id=1)
    add.enqueue(2, 3)
    after_enqueue = sorted(name for name in sys.modules if name.startswith("awa_django.worker"))
    user = get_user_model().objects.create_superuser("web", "web@example.com", "pw")
    client = Client()
    client.force_login(user)
    pages = {}
    for model in ("job", "queue", "workerinstance", "schedule"):
        pages[model] = client.get(reverse(f"admin:awa_{model}_changelist")).status_code
    pages["index"] = client.get(reverse("admin:index")).status_code
    transaction.set_rollback(True)
after_admin = sorted(name for name in sys.modules if name.startswith("awa_django.worker"))
from django.core.management import call_command
call_command("check", databases=["default"], verbosity=0)  # every system check, the database ones too
after_check = sorted(name for name in sys.modules if name.startswith("awa_django.worker"))
print(json.dumps({
    "setup": after_setup, "enqueue": after_enqueue, "admin": after_admin, "check": after_check, "pages": pages,
    "resolved": task_resolved
}))
"""


@pytest.mark.django_db
def test_web_process__loads_no_worker_module() -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "AWA_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", WEB_PROCESS], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])

    assert set(loaded["pages"].values()) == {200}, loaded["pages"]
    assert loaded["resolved"] is True  # the web side is whole: the Tasks backend was wired at setup
    assert loaded["setup"] == [], "django.setup() with the admin installed"
    assert loaded["enqueue"] == [], "Job.objects.enqueue, handler.enqueue, task.enqueue"
    assert loaded["admin"] == [], "the admin's pages"
    assert loaded["check"] == [], "manage.py check, the database checks included (runserver runs them too)"
