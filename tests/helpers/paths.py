"""Where things are: the checkout's root (the folder with pyproject.toml), whatever the depth of
the test module asking, and the recorded fixtures under tests/fixtures/."""

from __future__ import annotations

from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
