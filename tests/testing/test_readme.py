"""The README's testing example is the test file in this directory, verbatim."""

from pathlib import Path

from tests.harness import ROOT


def test_readme__embeds_the_example_test_file_verbatim():
    readme = (ROOT / "README.md").read_text()
    example = (Path(__file__).parent / "test_readme_example.py").read_text()
    section = readme.split("## Testing\n", 1)[1].split("\n## ", 1)[0]
    assert f"```python\n{example}```\n" in section
