"""The README is a front page and the docs hold the rest (issue 23 §5): every relative link in README.md and
docs/*.md leads somewhere (the file exists; a #fragment names a heading of that page, by GitHub's rule), the
README stays short, and its quick-start commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (not - or _), spaces to -."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target}: no {where.relative_to(REPO) if where.is_relative_to(REPO) else where}")
        elif fragment and where.suffix == ".md" and fragment not in anchors(where):
            broken.append(f"{target}: no heading #{fragment} in {where.name}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_is_a_front_page() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for command in ("bash scripts/demo", "bash scripts/test"):
        assert command in text and (REPO / command.split()[1]).exists(), command
    assert "pip install 'treemetry[torch]'" in text
    indexed = set(re.findall(r"\]\(([a-z_]+\.md)\)", (REPO / "docs" / "README.md").read_text()))
    assert indexed >= {p.name for p in PAGES[1:] if p.name != "README.md"}, "docs/README.md indexes every page"


def test_slugs_follow_githubs_rule() -> None:
    assert slug("What the SDK says") == "what-the-sdk-says"
    assert slug("The mergeable summary: `telemetry.Summary`") == "the-mergeable-summary-telemetrysummary"
    assert slug("Soak: 1,000 jobs, then 64 ranks") == "soak-1000-jobs-then-64-ranks"
