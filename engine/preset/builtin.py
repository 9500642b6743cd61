"""The presets shipped with redline (package data `redline.presets`), found by name.

`redline run quick` and `redline run presets/quick.toml` both work: an argument that names
an existing file is that file; otherwise a bare name (no `/`, optional `.toml`) is looked up
among the shipped presets. The TUI's `p` lists the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from .parse import load_preset
from .spec import PresetError

PACKAGE = "redline.presets"


@dataclass(frozen=True)
class BuiltinPreset:
    name: str  # file name without .toml
    description: str  # the preset's `description`, one line ("" when it has none)
    path: Path


def builtin_dir() -> Path:
    """The folder holding the shipped preset files (a plain folder in any pip install)."""
    return Path(str(files(PACKAGE)))


def builtin_presets() -> list[BuiltinPreset]:
    """Every shipped preset, by name; one that fails to parse still lists, with its error."""
    out = []
    for p in sorted(builtin_dir().glob("*.toml")):
        try:
            desc = load_preset(p).description
        except PresetError as exc:
            desc = f"(invalid: {exc})"
        out.append(BuiltinPreset(p.stem, desc, p))
    return out


def resolve_preset(arg: str) -> Path:
    """A preset argument as a file: an existing path, else a shipped preset's name.

    Raises PresetError (one line naming the value and the shipped names) when neither.
    """
    p = Path(arg).expanduser()
    if p.exists() or "/" in arg or "\\" in arg:
        return p
    name = arg[:-5] if arg.endswith(".toml") else arg
    found = builtin_dir() / f"{name}.toml"
    if name and found.is_file():
        return found
    names = ", ".join(b.stem for b in sorted(builtin_dir().glob("*.toml")))
    raise PresetError(f"{arg}: no such preset file, and not a built-in preset (built-in: {names})")
