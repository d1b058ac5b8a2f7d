"""The README is the first screen (what, for whom, the two commands, screenshots, links), and the
guides it points to are in docs/: every relative link of the README and docs/ names a file that
exists and, with an anchor, a heading that file has (GitHub's heading slugs)."""

from __future__ import annotations

import re

import pytest

from tests.support.shared import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
PAGES = [README, *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
COMMANDS = (
    "./scripts/demo     # set up and run the portal with demo data: http://127.0.0.1:8000/ (logins printed)",
    "./scripts/test     # install and run the test suite (needs PostgreSQL :5432 and Redis :6379)",
)


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_first_screen_has_the_two_commands_and_a_screenshot():
    lines = README.read_text().splitlines()
    first_screen = "\n".join(lines[:40])
    for command in COMMANDS:
        assert command in lines[:25], command
    assert "](docs/screenshots/" in first_screen
    assert len(lines) <= 120, "the guides belong in docs/, linked from the README"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor}")
    assert broken == []


def test_the_readme_links_every_guide_in_docs():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(README.read_text())}
    assert {p.resolve() for p in PAGES[1:]} <= linked
