"""One installable package: `redline`, with the checkout's folders mapped into it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from redline.engine.preset import PresetError, builtin_presets, load_preset, resolve_preset

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


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
