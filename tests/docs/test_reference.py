"""The reference pages name everything the code declares: settings, check ids, metrics (the
Prometheus table: tests/observability/test_docs.py).

Pure: these read the package's source and the pages, and open no database connection.
"""

from __future__ import annotations

import re
from datetime import timedelta

from awa_django.conf import DEFAULTS
from awa_django.observability.sink import OUTCOMES, QUEUE_GAUGES, WORKER_GAUGES
from awa_django.observability.views import HELP
from tests.docs.support import page
from tests.harness import ROOT

PACKAGE = ROOT / "awa_django"
# A check id as a string literal: `id="awa.E001"` in a CheckMessage, or a SettingProblem's id.
CHECK_ID_LITERAL = re.compile(r"""["'](awa\.[EW]\d{3})["']""")
CHECK_SECTION = re.compile(r"^### (awa\.[EW]\d{3}) \{#(awa\.[EW]\d{3})\}$", re.M)
TABLE_NAME = re.compile(r"^\| `([A-Za-z_.]+)` \|", re.M)


def defined_check_ids() -> set[str]:
    ids: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        ids |= set(CHECK_ID_LITERAL.findall(path.read_text(encoding="utf-8")))
    return ids


def test_defined_check_ids__are_found_in_the_source() -> None:
    ids = defined_check_ids()
    # The reader must see the ids the checks module and the settings rules emit.
    assert {"awa.E001", "awa.E005", "awa.E015", "awa.W001", "awa.W006"} <= ids


def test_checks_page__a_section_for_every_check_id_the_package_defines() -> None:
    sections = CHECK_SECTION.findall(page("reference/checks.md"))
    assert all(heading == anchor for heading, anchor in sections)
    documented = [heading for heading, _ in sections]
    assert len(documented) == len(set(documented)), "a check id has two sections"
    assert set(documented) == defined_check_ids()


def test_checks_page__sections_are_in_id_order() -> None:
    documented = [heading for heading, _ in CHECK_SECTION.findall(page("reference/checks.md"))]
    assert documented == sorted(documented, key=lambda i: (i[4] != "E", i))


def _default(value: object) -> str:
    if isinstance(value, timedelta):
        return repr(value).removeprefix("datetime.")
    return repr(value)


def settings_rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for match in re.finditer(r"^\| `([A-Z_]+)` \| `([^`]*)` \|", page("reference/settings.md"), re.M):
        assert match.group(1) not in rows, f"{match.group(1)} has two rows"
        rows[match.group(1)] = match.group(2)
    return rows


def test_settings_page__a_row_for_every_setting_with_its_default() -> None:
    assert settings_rows() == {key: _default(value) for key, value in DEFAULTS.items()}


def test_settings_page__every_check_link_names_a_documented_id() -> None:
    text = page("reference/settings.md")
    linked = set(re.findall(r"\(checks\.md#(awa\.[EW]\d{3})\)", text))
    assert linked and linked <= defined_check_ids()


HISTOGRAMS = ("awa_job_wait_seconds", "awa_job_run_seconds")


def prometheus_names() -> set[str]:
    """The families the worker's collector and the depth view export."""
    return {"awa_jobs_total", *HISTOGRAMS, *HELP} | {name for name, _, _ in (*QUEUE_GAUGES, *WORKER_GAUGES)}


def test_metrics_page__every_outcome_label_is_explained() -> None:
    text = page("reference/metrics.md")
    section = text.split("### The `outcome` label", 1)[1].split("\n## ", 1)[0]
    assert set(TABLE_NAME.findall(section)) == set(OUTCOMES)


def otel_instruments() -> set[str]:
    """The instruments ``observability/otel.py`` creates: its literal names, and the gauges it
    renames from the Prometheus ones."""
    source = (PACKAGE / "observability" / "otel.py").read_text(encoding="utf-8")
    names = set(re.findall(r"""create_(?:counter|histogram)\(\s*["'](awa\.[a-z_.]+)["']""", source))
    assert {"awa.jobs", "awa.job.wait", "awa.job.run"} <= names
    assert 'name.replace("awa_queue_", "awa.queue.")' in source
    assert 'name.replace("awa_worker_", "awa.worker.")' in source
    names |= {name.replace("awa_queue_", "awa.queue.") for name, _, _ in QUEUE_GAUGES}
    names |= {name.replace("awa_worker_", "awa.worker.") for name, _, _ in WORKER_GAUGES}
    return names


def test_metrics_page__the_opentelemetry_table_lists_every_instrument() -> None:
    text = page("reference/metrics.md").split("## OpenTelemetry", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    rows = [(first.strip("`"), last.strip("`")) for first, *_, last in cells]
    assert {instrument for instrument, _ in rows} == otel_instruments()
    assert {prometheus for _, prometheus in rows} <= prometheus_names()
