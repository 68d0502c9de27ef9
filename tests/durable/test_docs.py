"""The durable-jobs guide embeds its example test file verbatim, and names the API it documents."""

from pathlib import Path

from tests.harness import ROOT

GUIDE = ROOT / "docs" / "guide" / "durable-jobs.md"
API = [
    "step",
    "astep",
    "sleep",
    "asleep",
    "sleep_until",
    "asleep_until",
    "wait_for",
    "await_for",
    "Job.objects.signal",
    "asignal",
    "WaitTimeout",
    "SignalError",
    "DuplicateStepError",
    "UnstorableStepResultError",
    "StepKindMismatchError",
]


def test_durable_guide__embeds_the_example_test_file_verbatim() -> None:
    example = (Path(__file__).parent / "test_docs_example.py").read_text()
    section = GUIDE.read_text().split("## A complete example\n", 1)[1].split("\n## ", 1)[0]
    assert f"```python\n{example}```\n" in section


def test_durable_guide__names_the_api() -> None:
    text = GUIDE.read_text()
    assert [name for name in API if f"`{name}" not in text and f".{name}(" not in text] == []


def test_durable_guide__is_in_the_site_nav() -> None:
    assert "guide/durable-jobs.md" in (ROOT / "mkdocs.yml").read_text()
