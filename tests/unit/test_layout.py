"""The tests mirror the code (issue 45): a reader looking for the tests of engine/measure/histogram.py
finds tests/unit/engine/measure/test_histogram.py.

- tests/ holds at most MAX_ROOT_FILES files at its root (conftest.py; the rest are folders:
  helpers/, fixtures/ and the three kinds below);
- every test module lives under tests/unit/ (no server: one folder per package of engine/ and
  tui/, the checkout-wide tests at unit/'s root), tests/integration/ (what needs a server: a sim,
  an HTTP server, a redline process) or tests/e2e/ (the TUI and the CLI as a user drives them);
- every folder under tests/unit/ is a package of the checkout (tests/unit/engine/client/ is
  engine/client/), and a `test_<module>.py` there that names a module names one of that package,
  not another's;
- every folder of test modules is a package (an `__init__.py`: two folders may hold one basename);
- the screen pictures (`__snapshots__/<module>/`) sit beside the test module that draws them.

Read from the files (nothing is imported); the checkout's own tests, skipped where only the
installed package is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT, TESTS

MAX_ROOT_FILES = 10
KINDS = ("unit", "integration", "e2e")
SOURCES = ("engine", "tui")  # the packages unit/ mirrors (presets/ holds no Python but its __init__)

pytestmark = pytest.mark.skipif(not (ROOT / "engine").is_dir(), reason="needs the checkout's sources (engine/, tui/)")


def _dirs(base: Path) -> list[Path]:
    return sorted(p for p in base.rglob("*") if p.is_dir() and p.name not in ("__pycache__", "__snapshots__")
                  and "__snapshots__" not in p.relative_to(base).parts)


def _packages() -> dict[str, set[str]]:
    """Each package of engine/ and tui/ (its path from the checkout's root) -> its modules' names."""
    out: dict[str, set[str]] = {}
    for src in SOURCES:
        for init in (ROOT / src).rglob("__init__.py"):
            out[init.parent.relative_to(ROOT).as_posix()] = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
    return out


def test_tests_root_holds_at_most_ten_files():
    files = sorted(p.name for p in TESTS.iterdir() if p.is_file())
    assert len(files) <= MAX_ROOT_FILES, files
    assert "conftest.py" in files


def test_every_test_module_is_a_unit_integration_or_e2e_test():
    stray = [p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("test_*.py"))
             if p.relative_to(TESTS).parts[0] not in KINDS]
    assert stray == []


def test_every_unit_folder_is_a_package_of_the_checkout():
    packages = _packages()
    unit = TESTS / "unit"
    strays = [d.relative_to(TESTS).as_posix() for d in _dirs(unit) if d.relative_to(unit).as_posix() not in packages]
    assert strays == []
    assert {"engine", "tui"} <= {d.relative_to(unit).as_posix() for d in _dirs(unit)}


def test_a_test_named_for_a_module_sits_in_that_modules_package():
    """tests/unit/engine/telemetry/test_cap.py tests engine/telemetry/cap.py; a test_cap.py under
    tests/unit/engine/load/ (where no cap.py is, but another package has one) is misplaced."""
    packages = _packages()
    everywhere = set().union(*packages.values())
    unit = TESTS / "unit"
    misplaced = []
    for f in sorted(unit.rglob("test_*.py")):
        pkg = f.parent.relative_to(unit).as_posix()
        name = f.stem.removeprefix("test_")
        if pkg in packages and name in everywhere and name not in packages[pkg]:
            misplaced.append(f"{f.relative_to(TESTS).as_posix()}: {name}.py is in "
                             + ", ".join(sorted(p for p, mods in packages.items() if name in mods)))
    assert misplaced == []


def test_every_folder_of_test_modules_is_a_package():
    missing = sorted({f.parent.relative_to(TESTS).as_posix() for f in TESTS.rglob("test_*.py")
                      if not (f.parent / "__init__.py").is_file()})
    assert missing == []


def test_screen_pictures_sit_beside_the_module_that_draws_them():
    pictures = [d for d in sorted(TESTS.rglob("__snapshots__")) if d.is_dir()]
    assert pictures, "the screen pictures (tests/e2e/__snapshots__/test_screen/) are missing"
    orphans = [f"{(d / m.name).relative_to(TESTS).as_posix()}" for d in pictures for m in sorted(d.iterdir())
               if m.is_dir() and not (d.parent / f"{m.name}.py").is_file()]
    assert orphans == []
