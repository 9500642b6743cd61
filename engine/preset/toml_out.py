"""Writing a preset: a `Preset` as TOML text that parse.py reads back to an equal one.

tomli-w writes every value (quoting and escapes, numbers, lists, inline tables); which keys of
each table are written, and the comment lines above it, come from the keys' declarations
(tables.py `write_keys`: a key declared `always`, or not at its default, with its comment) and,
for [ramp], from its form (ramp_forms.py `ramp_table`).
"""

from __future__ import annotations

import tomli_w

from .. import __version__
from ..text import one_line
from .ramp_forms import ramp_table
from .spec import Preset
from .tables import TABLES, TOP, write_keys


def preset_to_toml(preset: Preset, header: str | None = None) -> str:
    """A preset as TOML text (commented) that load_preset reads back to an equal Preset
    (apart from `path`). `header` adds comment lines at the top. A ramp is always written
    as its concurrency list (start/factor/max expanded)."""
    lines: list[str] = [f"# redline preset: {one_line(preset.name, multiline_only=True)}"]
    if header:
        lines += [f"# {h}".rstrip() for h in header.splitlines()]
    lines.append(f"# Written by redline {__version__}. Every key: docs/presets.md.")
    _, top = write_keys(TOP, preset)
    parts = ["\n".join(lines) + "\n\n" + tomli_w.dumps(top)]
    for comments, table, body in _tables(preset):
        parts.append("".join(f"# {c}\n" for c in comments) + tomli_w.dumps({table: body}))
    return "\n".join(parts)


def _tables(preset: Preset) -> list[tuple[list[str], str, dict[str, object]]]:
    """(comment lines, table name, its keys) for each table, in the order they are written."""
    out: list[tuple[list[str], str, dict[str, object]]] = []
    for name, table in TABLES.items():
        if name == "ramp":
            comments, body = ramp_table(preset.ramp, preset.repeats)
        elif name == "gate":
            if preset.gate is None:
                continue
            comments, body = [], {"conditions": list(preset.gate)}
        else:
            spec = getattr(preset, name)
            if spec is None:
                continue
            comments, body = write_keys(table.keys, spec)
            if table.optional and not body:
                continue
        out.append(([*table.comments, *comments], name, body))
    return out
