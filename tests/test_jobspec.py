"""CopyLines: the one writer of copy_jobs' COPY text lines (enqueue_many's plain and full specs)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from awa_django.jobspec import CopyLines, build_row, name_problem
from awa_django.sql import statements

NOW = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
ESCAPES = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r"}

# The hypothesis stubs want the category names as Literals; a tuple of str is what runs.
_characters = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")  # type: ignore[arg-type]
# What build_row accepts as a kind or a queue: no surrounding whitespace, no control character.
names = st.text(_characters, min_size=1, max_size=20).filter(lambda name: name_problem(name) is None and name.strip())
texts = st.text(_characters, max_size=12)


def copy_columns() -> list[str]:
    """The column list of copy_jobs.sql, in its order."""
    match = re.search(r"COPY awa_job \((.*?)\) FROM STDIN", statements["copy_jobs"], re.S)
    assert match is not None
    return [name.strip() for name in match.group(1).split(",")]


def fields(line: str) -> dict[str, str | None]:
    """A COPY text line back to its values (\\N is NULL), by column name."""
    assert line.endswith("\n") and line.count("\n") == 1
    values = [
        None if raw == "\\N" else re.sub(r"\\[\\tnr]", lambda m: ESCAPES[m.group()], raw)
        for raw in line[:-1].split("\t")
    ]
    columns = copy_columns()
    assert len(values) == len(columns)
    return dict(zip(columns, values, strict=True))


@given(kind=names, queue=names, args=st.dictionaries(texts, texts, max_size=3))
def test_line__a_plain_job_reads_back_as_written(kind: str, queue: str, args: dict[str, str]) -> None:
    copy = CopyLines(NOW)
    row = build_row(kind, args, queue=queue, now=NOW)

    got = fields(copy.line(row.kind, row.queue, row.args_json, "available", 3, 7))

    assert got == {
        "kind": kind,
        "queue": queue,
        "args": row.args_json,
        "state": "available",
        "priority": "3",
        "attempt": "0",
        "max_attempts": "7",
        "run_at": NOW.isoformat(),
        "created_at": NOW.isoformat(),
        "errors": "[]",
        "metadata": "{}",
        "tags": "{}",
        "unique_key": None,
        "unique_states": None,
        "run_lease": "0",
        "timeout": None,
        "fair_key": "",
    }
    assert json.loads(got["args"] or "") == args


@given(kind=names, args=st.dictionaries(texts, texts, max_size=3))
def test_line__the_shared_tail_is_the_full_tail_of_a_plain_job(kind: str, args: dict[str, str]) -> None:
    copy = CopyLines(NOW, '{"traceparent":"00-a\\\\b"}')
    row = build_row(kind, args, now=NOW)

    shared = copy.line(row.kind, row.queue, row.args_json, "available", 2, 25)
    full = copy.line(row.kind, row.queue, row.args_json, "available", 2, 25, run_at=NOW)  # takes the long way

    assert shared == full
    assert fields(shared)["metadata"] == '{"traceparent":"00-a\\\\b"}'


@given(tags=st.lists(texts.filter(str.strip), max_size=4), metadata=st.dictionaries(texts, texts, max_size=3))
def test_row_line__every_column_of_a_full_spec(tags: list[str], metadata: dict[str, str]) -> None:
    run_at = NOW + timedelta(hours=1)
    row = build_row(
        "k\\ind", {"a": "b\\c\td"}, queue="q\\x", run_at=run_at, metadata=metadata, tags=tags, unique=True, now=NOW
    )

    got = fields(CopyLines(NOW).row_line(row, "scheduled"))

    assert (got["kind"], got["queue"], got["state"], got["run_at"]) == (
        "k\\ind",
        "q\\x",
        "scheduled",
        run_at.isoformat(),
    )
    assert json.loads(got["args"] or "") == {"a": "b\\c\td"}
    assert json.loads(got["metadata"] or "") == metadata
    assert got["unique_key"] == row.unique_key
    assert got["unique_states"] == "{" + ",".join(f'"{s}"' for s in row.unique_states or []) + "}"
    expected_tags = "{" + ",".join('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in tags) + "}"
    assert got["tags"] == expected_tags
