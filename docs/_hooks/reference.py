"""MkDocs hook: the reference pages that are generated from the code, so they cannot drift.

A page asks for a generated part with a marker comment on a line of its own:

- ``<!-- generated: sql-contracts -->``: one section per ``awa_django/sql/*.sql`` file, its header
  comment (purpose, parameters, index, locking) and the statement itself;
- ``<!-- generated: awa_worker-help -->`` / ``<!-- generated: awa_health-help -->``: the command's
  ``--help``, from its own argument parser.

The hook runs before the page is rendered, so the generated headings take part in MkDocs' anchor
validation like written ones. ``tests/docs/`` imports this module and tests the generators.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SQL_DIR = ROOT / "awa_django" / "sql"
MARKER = re.compile(r"^<!-- generated: ([a-z_-]+) -->$", re.M)


@dataclass(frozen=True)
class SqlContract:
    """One SQL file: its name (the file's stem, the name code loads it by), header and body."""

    name: str
    header: str
    statement: str


def split_header(name: str, text: str) -> SqlContract:
    """The leading ``--`` comment block of ``text`` as the header, the rest as the statement.

    Every statement's header must start with ``-- <name>: <purpose>``; a file without one is an
    error naming the file, so a statement without its contract fails the docs build.
    """
    lines = text.splitlines()
    header: list[str] = []
    for line in lines:
        if not line.startswith("--"):
            break
        header.append(line[3:] if line.startswith("-- ") else line[2:])
    if not header or not header[0].startswith(f"{name}: "):
        first = lines[0] if lines else ""
        raise ValueError(
            f"awa_django/sql/{name}.sql: the header must start with '-- {name}: <purpose>', "
            f"found {first!r}; write its purpose, parameters, index and locking there"
        )
    statement = "\n".join(lines[len(header) :]).strip("\n")
    return SqlContract(name=name, header="\n".join(header), statement=statement)


def sql_contracts(sql_dir: Path = SQL_DIR) -> list[SqlContract]:
    """Every ``.sql`` file of ``sql_dir``, by name."""
    return [split_header(path.stem, path.read_text(encoding="utf-8")) for path in sorted(sql_dir.glob("*.sql"))]


def purpose(contract: SqlContract) -> str:
    """The header's first sentence, without the name: what the statement is for."""
    text = " ".join(line.strip() for line in contract.header.splitlines())
    text = text.split(": ", 1)[1].split(" Parameters:", 1)[0]
    sentence = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
    return sentence.replace("|", "\\|")


def _fence(text: str, language: str) -> str:
    """``text`` in a fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def render_sql_reference(contracts: list[SqlContract]) -> str:
    """Markdown: an index of the statements, then one ``##`` section per statement."""
    parts = ["| statement | purpose |", "| --- | --- |"]
    for contract in contracts:
        parts.append(f"| [`{contract.name}`](#{contract.name}) | {purpose(contract)} |")
    for contract in contracts:
        parts.append("")
        parts.append(f"## `{contract.name}` {{#{contract.name}}}")
        parts.append("")
        parts.append(f"`awa_django/sql/{contract.name}.sql`")
        parts.append("")
        parts.append(_fence(contract.header, "text"))
        parts.append("")
        parts.append('??? note "The statement"')
        parts.append("")
        parts.extend("    " + line if line else "" for line in _fence(contract.statement, "sql").splitlines())
    return "\n".join(parts) + "\n"


def command_help(name: str) -> str:
    """``manage.py <name> --help``, from the command's own parser.

    Outside a Django project (the docs build), Django is set up with awa_django alone: building a
    parser reads no setting and opens no connection."""
    import django
    from django.apps import apps
    from django.conf import settings

    if str(ROOT) not in sys.path:  # a DJANGO_SETTINGS_MODULE of the checkout (testproject) must import
        sys.path.insert(0, str(ROOT))
    if not settings.configured and "DJANGO_SETTINGS_MODULE" not in os.environ:
        settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "awa_django"])
    if not apps.ready:
        django.setup()
    from django.core.management import load_command_class

    command = load_command_class("awa_django", name)
    parser = command.create_parser("manage.py", name)
    # A fixed width: the page must not depend on the terminal the build runs in.
    parser.formatter_class = _fixed_width(parser.formatter_class)
    return parser.format_help().rstrip("\n")


def _fixed_width(formatter: Any) -> Any:
    def build(prog: str) -> Any:
        return formatter(prog, width=100)

    return build


def generate(part: str) -> str:
    """The Markdown for one marker's part; an unknown part is an error naming the known ones."""
    if part == "sql-contracts":
        return render_sql_reference(sql_contracts())
    if part.endswith("-help") and part[: -len("-help")] in ("awa_worker", "awa_health"):
        return _fence(command_help(part[: -len("-help")]), "text") + "\n"
    raise ValueError(f"unknown generated part {part!r}: use sql-contracts, awa_worker-help or awa_health-help")


def expand(markdown: str) -> str:
    """``markdown`` with every marker replaced by its generated part."""
    return MARKER.sub(lambda match: generate(match.group(1)), markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs' page event: expand the markers before the page is rendered."""
    return expand(markdown)
