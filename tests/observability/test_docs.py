"""The dashboard, the alert rules and the docs' metric table name only metrics that exist."""

from __future__ import annotations

import json
import re

from awa_django.observability.sink import QUEUE_GAUGES, WORKER_GAUGES
from awa_django.observability.views import HELP
from tests.harness import ROOT

NAME = re.compile(r"\bawa_[a-z_]+\b")
HISTOGRAMS = ("awa_job_wait_seconds", "awa_job_run_seconds")


def exported() -> set[str]:
    names = {"awa_jobs_total", *HISTOGRAMS, *HELP}
    names |= {name for name, _, _ in (*QUEUE_GAUGES, *WORKER_GAUGES)}
    names |= {f"{h}_{suffix}" for h in HISTOGRAMS for suffix in ("bucket", "count", "sum")}
    return names


def test_dashboard__every_query_uses_exported_metrics() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    used = {name for expr in exprs for name in NAME.findall(expr)}
    assert used - exported() == set()
    assert {"awa_jobs_total", "awa_queue_oldest_available_age_seconds", "awa_queue_fair_share"} <= used


def test_alerts__every_rule_uses_exported_metrics() -> None:
    text = (ROOT / "docs" / "alerts.yml").read_text()
    exprs = re.findall(r"expr: (?:\|\n((?:\s{10}.*\n)+)|(.*))", text)
    used = {name for block in exprs for part in block for name in NAME.findall(part)}
    assert used - exported() == set()
    assert {"awa_queue_oldest_available_age_seconds", "awa_workers_live", "awa_jobs_total"} <= used


def test_metrics_reference__the_metric_table_lists_every_metric() -> None:
    reference = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `(awa_[a-z_]+)` \|", reference, re.M)}
    documented = exported() - {f"{h}_{s}" for h in HISTOGRAMS for s in ("bucket", "count", "sum")}
    assert table == documented
