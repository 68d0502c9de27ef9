"""The README's links into the docs point at pages that exist (MkDocs checks the site's own links;
the README is not part of the site)."""

from __future__ import annotations

import re

from tests.harness import ROOT


def test_readme__every_relative_link_names_an_existing_file() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme) if "://" not in t]
    assert len(targets) >= 10
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []


def test_readme__links_the_tutorial_and_every_reference_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = ["docs/tutorial.md", *(f"docs/reference/{p.name}" for p in (ROOT / "docs" / "reference").glob("*.md"))]
    unlinked = [page for page in pages if f"]({page})" not in readme]
    assert unlinked == []
