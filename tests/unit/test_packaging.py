"""One installable package: `redline`, with the checkout's folders mapped into it."""

from __future__ import annotations

import sys

import pytest

from redline.engine.preset import PresetError, builtin_presets, load_preset, resolve_preset

from helpers import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib



def test_every_package_folder_is_installed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    found = set()
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([pkg, *rel.parts]))
    assert found == listed, f"pyproject packages differ from the folders: missing {found - listed}, extra {listed - found}"


def _matches(rel: str, pattern: str) -> bool:
    """setuptools' package-data glob: `*` stays within one folder."""
    from fnmatch import fnmatchcase

    a, b = rel.split("/"), pattern.split("/")
    return len(a) == len(b) and all(fnmatchcase(x, y) for x, y in zip(a, b, strict=False))


def test_every_data_file_is_package_data():
    """A file the code reads beside itself (the presets, the TUI's styles, the HTML report's
    vendored plotly.js) is installed only when [tool.setuptools.package-data] names it: a
    plain `pip install .` from another directory leaves out anything else (include-package-data
    is off)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = cfg.get("package-data", {})
    missing = []
    for pkg, folder in cfg["package-dir"].items():
        base = ROOT / folder
        for f in sorted(base.rglob("*")):
            if not f.is_file() or f.suffix in (".py", ".pyc") or "__pycache__" in f.parts:
                continue
            if f.suffix in (".c", ".so", ".pyd"):  # setup.py's optional C helper: its source (setuptools puts
                continue  # an extension's sources in the sdist itself) and what a build leaves beside it
            owner = f.parent  # the nearest package folder holds it
            while not (owner / "__init__.py").exists() and owner != base:
                owner = owner.parent
            name = ".".join([pkg, *owner.relative_to(base).parts])
            rel = f.relative_to(owner).as_posix()
            if not any(_matches(rel, p) for p in data.get(name, [])):
                missing.append(f"{name}: {rel}")
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
    assert (ROOT / "engine" / "report" / "assets" / "plotly-basic.min.js").is_file()


def test_builtin_presets_listed_and_parse():
    names = {b.name: b for b in builtin_presets()}
    assert {"quick", "until-it-breaks", "c1-probe", "doubling"} <= set(names)
    for b in names.values():
        assert not b.description.startswith("(invalid"), b
        assert load_preset(b.path).name


def test_resolve_by_name_path_and_unknown(tmp_path):
    assert resolve_preset("quick").name == "quick.toml"
    assert resolve_preset("quick.toml").name == "quick.toml"
    own = tmp_path / "mine.toml"
    own.write_text("[ramp]\nconcurrency = [1]\n")
    assert resolve_preset(str(own)) == own
    with pytest.raises(PresetError) as ei:
        resolve_preset("nosuch")
    msg = str(ei.value)
    assert "nosuch" in msg and "quick" in msg and "\n" not in msg
