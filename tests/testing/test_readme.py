"""The testing guide's example (docs/how-to/testing.md) is the test file in this directory, verbatim."""

from pathlib import Path

from tests.harness import ROOT


def test_testing_guide__embeds_the_example_test_file_verbatim():
    guide = (ROOT / "docs" / "how-to" / "testing.md").read_text()
    example = (Path(__file__).parent / "test_readme_example.py").read_text()
    section = guide.split("## A complete example\n", 1)[1].split("\n## ", 1)[0]
    assert f"```python\n{example}```\n" in section
