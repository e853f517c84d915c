"""The README and the pages under docs/ link to each other: every relative link names a file
that exists, and every #anchor a heading on that page (as GitHub makes its ids), so a page moved
or a heading renamed breaks a test, not a reader's click."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def heading_ids(page: Path) -> set[str]:
    """GitHub's ids for a page's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated one suffixed -1, -2, …"""
    ids: set[str] = set()
    repeats: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text("utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = repeats.get(slug, 0)
        repeats[slug] = n + 1
        ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def relative_links(page: Path) -> list[str]:
    """The page's links outside code blocks and spans, less those with a scheme (https:)."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text("utf-8")))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_docs_have_links_to_check() -> None:
    assert sum(len(relative_links(p)) for p in DOCS) > 20  # the README links every page


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_ids(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.name}: {broken}"


def test_a_heading_id_is_what_github_makes(tmp_path: Path) -> None:
    """'## Capacity planning: `ridgeline plan`' → capacity-planning-ridgeline-plan; a second
    heading of the same words takes -1, a third -2; a '#' line inside a code fence is no
    heading."""
    page = ROOT / "docs" / "plan.md"
    assert "capacity-planning-ridgeline-plan" in heading_ids(page)
    made = tmp_path / "p.md"
    made.write_text("# Fit: `ridgeline fit`\n## Notes\n```\n# not a heading\n```\n"
                    "### Notes\n## Notes\n", "utf-8")
    assert heading_ids(made) == {"fit-ridgeline-fit", "notes", "notes-1", "notes-2"}
