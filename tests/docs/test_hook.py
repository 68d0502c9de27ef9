"""The generated reference pages: the SQL contracts and the commands' help (docs/_hooks/reference.py).

Pure: the generators read files and argument parsers; no database connection is opened.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.docs.support import load_hook, page
from tests.harness import ROOT

SQL_DIR = ROOT / "awa_django" / "sql"
hook = load_hook()


def test_mkdocs_yml__registers_the_hook() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^hooks:\n  - docs/_hooks/reference\.py$", config, re.M)


@pytest.mark.parametrize(
    ("path", "part"),
    [
        ("reference/sql.md", "sql-contracts"),
        ("reference/commands.md", "awa_worker-help"),
        ("reference/commands.md", "awa_health-help"),
    ],
)
def test_reference_pages__ask_for_their_generated_parts(path: str, part: str) -> None:
    assert f"\n<!-- generated: {part} -->\n" in page(path)


def test_sql_page__a_section_for_every_sql_file_with_its_header_verbatim() -> None:
    files = sorted(SQL_DIR.glob("*.sql"))
    assert len(files) >= 30
    rendered = hook.expand(page("reference/sql.md"))
    for path in files:
        name = path.stem
        section = rendered.split(f"\n## `{name}` {{#{name}}}\n", 1)
        assert len(section) == 2, f"no section for {path.name}"
        body = section[1].split("\n## ", 1)[0]
        header = [line.removeprefix("-- ").removeprefix("--") for line in _leading_comments(path)]
        assert "\n".join(header) in body
        assert f"(#{name})" in rendered.split("\n## ", 1)[0], f"{name} missing from the index table"
    assert len(re.findall(r"^## `", rendered, re.M)) == len(files)


def _leading_comments(path: Path) -> list[str]:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


def test_sql_page__each_statement_is_shown_whole() -> None:
    for contract in hook.sql_contracts():
        text = (SQL_DIR / f"{contract.name}.sql").read_text(encoding="utf-8")
        assert contract.statement and contract.statement in text
        assert text.strip("\n").endswith(contract.statement)


def test_split_header__a_file_without_its_contract_is_an_error_naming_it() -> None:
    expected = r"awa_django/sql/claim_jobs\.sql: the header must start with '-- claim_jobs: "
    with pytest.raises(ValueError, match=expected):
        hook.split_header("claim_jobs", "SELECT 1;\n")
    with pytest.raises(ValueError, match="found '-- claim: wrong name'"):
        hook.split_header("claim_jobs", "-- claim: wrong name\nSELECT 1;\n")


comment_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)
sql_line = comment_text.filter(lambda line: not line.startswith("-"))


@given(
    purpose=comment_text,
    more=st.lists(comment_text, max_size=5),
    body=st.lists(sql_line, min_size=1, max_size=5).filter(lambda lines: lines[0].strip() != ""),
)
def test_split_header__any_comment_block_and_body_split_back_apart(
    purpose: str, more: list[str], body: list[str]
) -> None:
    header = [f"insert_job: {purpose}", *more]
    text = "\n".join(f"-- {line}" for line in header) + "\n" + "\n".join(body) + "\n"
    contract = hook.split_header("insert_job", text)
    assert contract.header == "\n".join(header)
    assert contract.statement == "\n".join(body).strip("\n")


@given(st.text(alphabet="`ab\n", max_size=30))
def test_fence__no_backtick_run_inside_closes_the_block(text: str) -> None:
    fenced = hook._fence(text, "text")
    fence = fenced.split("text", 1)[0]
    assert fenced == f"{fence}text\n{text}\n{fence}"
    assert all(len(run) < len(fence) for run in re.findall(r"`+", text))


def test_unknown_generated_part__is_an_error_naming_the_known_ones() -> None:
    expected = "unknown generated part 'sql': use sql-contracts, awa_worker-help or awa_health-help"
    with pytest.raises(ValueError, match=expected):
        hook.expand("<!-- generated: sql -->")


@pytest.mark.parametrize("command", ["awa_worker", "awa_health"])
def test_commands_page__shows_every_option_of_the_command(command: str) -> None:
    from django.core.management import load_command_class

    parser = load_command_class("awa_django", command).create_parser("manage.py", command)
    rendered = hook.generate(f"{command}-help")
    # Options hidden from --help (argparse.SUPPRESS: internal, like the child's --process-index) are
    # not the user's to pass.
    options = [
        option for action in parser._actions if action.help != argparse.SUPPRESS for option in action.option_strings
    ]
    assert "--help" in options and len(options) > 10
    for option in options:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", rendered), f"{option} is not on the page"
