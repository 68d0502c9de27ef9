"""The documented settings table is the declarations in ``awa_django.conf``: every AWA key a row,
its default as declared, its meaning as declared; no row for a key that does not exist."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from awa_django.conf import DEFAULTS, SETTINGS, settings_table, shown_default

# Where the settings table is documented (move it here when the docs move).
SETTINGS_DOC = Path(__file__).resolve().parent.parent / "README.md"

HEADER = "| key | default | meaning |"
ROW = re.compile(r"^\| `(?P<key>[A-Z_]+)` \| `(?P<default>[^`]*)` \| (?P<meaning>.*) \|$")


def documented_rows(text: str) -> list[tuple[str, str, str]]:
    """The (key, default, meaning) rows of the first settings table in ``text``; a row that does
    not have that shape fails, naming the line."""
    lines = text.splitlines()
    start = lines.index(HEADER) + 2  # the header and its --- line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        match = ROW.match(line)
        assert match is not None, f"a settings row not of the form | `KEY` | `default` | meaning |: {line}"
        rows.append((match["key"], match["default"], match["meaning"]))
    return rows


def test_settings_doc__has_one_row_per_setting_with_its_declared_default_and_meaning() -> None:
    rows = documented_rows(SETTINGS_DOC.read_text(encoding="utf-8"))

    assert [key for key, _, _ in rows] == list(SETTINGS)
    assert {key: default for key, default, _ in rows} == {key: shown_default(value) for key, value in DEFAULTS.items()}
    assert rows == settings_table()


def test_settings_table__every_setting_has_a_meaning() -> None:
    assert [key for key, _, meaning in settings_table() if not meaning.strip()] == []


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "None"),
        (True, "True"),
        (1.0, "1.0"),
        (32, "32"),
        ("process", '"process"'),
        (timedelta(days=7), "timedelta(days=7)"),
        (timedelta(seconds=90), "timedelta(seconds=90)"),
    ],
)
def test_shown_default__writes_python_with_double_quoted_strings(value: object, shown: str) -> None:
    assert shown_default(value) == shown


def test_documented_rows__a_missing_setting_is_noticed() -> None:
    text = "\n".join([HEADER, "| --- | --- | --- |", "| `POLL_INTERVAL` | `1.0` | x |", "", "after"])

    assert documented_rows(text) == [("POLL_INTERVAL", "1.0", "x")]
    assert documented_rows(text) != settings_table()
