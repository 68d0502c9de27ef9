"""The workflows guide embeds its example test file verbatim, and names what the package exports."""

from pathlib import Path

from awa_django import workflows
from tests.harness import ROOT

GUIDE = ROOT / "docs" / "guide" / "workflows.md"


def test_workflows_guide__embeds_the_example_test_file_verbatim() -> None:
    example = (Path(__file__).parent / "test_docs_example.py").read_text()
    section = GUIDE.read_text().split("## A complete example\n", 1)[1].split("\n## ", 1)[0]
    assert f"```python\n{example}```\n" in section


def test_workflows_guide__mentions_every_public_name() -> None:
    text = GUIDE.read_text()
    missing = [name for name in workflows.__all__ if f"`{name}" not in text]
    assert missing == []
