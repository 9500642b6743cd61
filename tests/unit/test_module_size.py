"""No module of engine/ or tui/ passes 600 lines (issues 22 and 36): a module a reader can
hold in their head, split by job when it grows."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT

MAX_LINES = 600


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


@pytest.mark.parametrize("folder", ["engine", "tui"])
def test_no_module_passes_600_lines(folder):
    base = ROOT / folder
    too_long = {str(p.relative_to(ROOT)): n for p in sorted(base.rglob("*.py")) if (n := _lines(p)) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): {too_long}"
