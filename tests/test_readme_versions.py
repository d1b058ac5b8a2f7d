"""The documented version matrix (docs/install.md, linked from the README) is runtime/versions.py's:
one row per component, the same tested and oldest supported versions (an em dash where the matrix
has none)."""

from __future__ import annotations

import re

from runtime.versions import VERSIONS
from tests.support.shared import PROJECT_ROOT


def _readme_matrix() -> dict[str, tuple[str, str]]:
    text = (PROJECT_ROOT / "docs" / "install.md").read_text()
    section = text.split("\n## Version matrix\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| ([^|]+?) \|", section, flags=re.M)
    return {name: (tested, oldest) for name, tested, oldest in rows if name not in ("Component", "---")}


def test_the_readme_matrix_is_runtime_versions():
    shown = lambda value: value or "—"  # noqa: E731
    expected = {c.name: (shown(c.tested), shown(c.minimum)) for c in VERSIONS.values()}
    assert _readme_matrix() == expected
