"""No engine module passes 600 lines (issue 22): a module a reader can hold in their head,
split by job when it grows."""

from __future__ import annotations

from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
MAX_LINES = 600


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_no_engine_module_passes_600_lines():
    too_long = {str(p.relative_to(ENGINE)): n for p in sorted(ENGINE.rglob("*.py")) if (n := _lines(p)) > MAX_LINES}
    assert not too_long, f"engine modules over {MAX_LINES} lines (split them by job): {too_long}"
