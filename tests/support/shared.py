"""Access to ../shared (CRD schemas, metric expositions) beside the project.

A clone used elsewhere may not have ../shared: those tests skip with the reason. Under CI
(`CI` set) a missing path is a failure, so a wrong path can never pass silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("PORTAL_SHARED_DIR", PROJECT_ROOT.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """The path under ../shared, or skip (fail under CI) when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"{path} is absent: these tests need ../shared beside the project"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set, so this is an error, not a skip)")
        pytest.skip(message)
    return path
