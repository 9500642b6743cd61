"""Reading a preset: TOML text in, a checked `Preset` out, or one line saying what is wrong.

Every key is checked (docs/presets.md lists them all); unknown tables and keys are errors.
A bad one raises PresetError naming the file, the key and what is accepted. In short:

    name = "until-it-breaks"          # optional; default: the file name without .toml
    description = "..."               # optional; one line, shown in the preset picker
    [target]                          # optional; --url overrides
    url = "http://127.0.0.1:30000"
    [workload]
    api = "chat"                      # chat | completions | generate
    input_len = 1024
    [ramp]                            # required
    concurrency = [32, 64, 96]        # or start/factor/max, or start/step/max
    hold_s = 30                       # measured window per step, at least
    [stop]                            # absent rule = off; "server gone" and "stalled" are always on
    plateau_gain = 0.05
    [after]                           # the C=1 probe at the end
    [gate]                            # optional; CI conditions of a headless run (engine/report/gate.py)
    conditions = ["knee>=64", "errors<=1%"]   # or a string; --gate replaces them

Each key is declared once (spec.py, tables.py, ramp_forms.py): this module checks the
document's shape against those declarations (no unknown tables or keys), reads each table
through them, [ramp] through its forms (ramp_forms.py), and checks what one table says
against another (`_check_shape`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from typing import cast

from ..measure.slo import Slo
from ..rules.guard import GuardSpec
from ..text import closest, did_you_mean
from .fields import Ctx, PresetError, TomlTable, key_name
from .keys import Key, build
from .ramp_forms import parse_ramp
from .spec import AfterSpec, Preset, RampSpec, StopSpec, TargetSpec, WorkloadSpec
from .tables import GUARD, SLO, STOP, TABLES, TOP, read_keys

__all__ = ["TABLES", "load_preset", "parse_preset", "parse_toml"]

TOP_KEYS = tuple(k.name for k in TOP)
TABLE_NAMES = tuple(TABLES)


def parse_toml(text: str, source: str) -> Preset:
    """Check preset TOML text; `source` names it in errors. Only ever raises PresetError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PresetError(f"{source}: not valid TOML: {e}") from None
    except RecursionError:
        raise PresetError(f"{source}: not valid TOML: nested too deeply") from None
    return parse_preset(data, source)


def load_preset(path: str | Path) -> Preset:
    """Read and check a preset file. Raises PresetError (one line) on any problem."""
    p = Path(path)
    source = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise PresetError(f"{source}: file not found") from None
    except IsADirectoryError:
        raise PresetError(f"{source}: is a directory, expected a .toml preset file") from None
    except PermissionError:
        raise PresetError(f"{source}: permission denied") from None
    except (OSError, ValueError) as e:
        raise PresetError(f"{source}: cannot read: {e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PresetError(f"{source}: not valid TOML: not UTF-8 text") from None
    return parse_toml(text, source)


def parse_preset(data: TomlTable, source: str) -> Preset:
    """Check a decoded preset. `source` names the file in errors and anchors relative
    dataset paths (its folder). Only ever raises PresetError."""
    try:
        base = Path(str(source)).expanduser().resolve().parent
    except (OSError, ValueError, RuntimeError):
        base = Path.cwd()
    ctx = Ctx(str(source), base)
    if not isinstance(data, dict):
        raise ctx.bad("", "a TOML document (a table of tables)", data)
    _check_names(ctx, data)

    top = read_keys(ctx, TOP, data)
    name = cast(str, top.get("name") or Path(str(source)).stem or str(source))
    target = build(TargetSpec, read_keys(ctx, TABLES["target"].keys, _table(data, "target")))
    workload = _workload(ctx, _table(data, "workload"), target.api)
    if "ramp" not in data:
        raise ctx.err("[ramp]", "missing (a preset needs [ramp] with concurrency = [..] or start/factor/max)")
    ramp = parse_ramp(ctx, data["ramp"])
    _check_shape(ctx, workload, ramp)
    stop = build(StopSpec, read_keys(ctx, STOP, _table(data, "stop")))
    after = build(AfterSpec, read_keys(ctx, TABLES["after"].keys, _table(data, "after")))
    slo = build(Slo, _at_least_one(ctx, "slo", SLO, _table(data, "slo"))) if "slo" in data else None
    guard = build(GuardSpec, _at_least_one(ctx, "guard", GUARD, _table(data, "guard"))) if "guard" in data else None
    gate = _gate(ctx, data["gate"]) if "gate" in data else None
    repeats = _repeats(ctx, _table(data, "ramp"))
    path = Path(str(source)) if source else None
    return Preset(name, path, target, workload, ramp, stop, after, cast(str, top.get("description", "")), slo, guard, gate,
                  repeats)


def _table(data: TomlTable, name: str) -> TomlTable:
    """A table of the document (a table: _check_names saw to it), {} when absent."""
    value = data.get(name, {})
    return value if isinstance(value, dict) else {}


def _check_names(ctx: Ctx, data: TomlTable) -> None:
    """No unknown table or key: each refused with the nearest real one, else every accepted one."""
    for key, value in data.items():
        if key in TOP_KEYS or (key == "gate" and not isinstance(value, dict)):
            continue  # gate = "knee>=64" (or a list): checked by _gate
        if key in TABLES:
            if not isinstance(value, dict):
                raise ctx.bad(f"[{key}]", "a table", value)
            allowed = tuple(k.name for k in TABLES[key].keys)
            for sub in value:
                if sub not in allowed:
                    # `; did you mean p99_ttft_ms?` when one is close, else every accepted key
                    hint = did_you_mean(sub, allowed) or f" (accepted: {', '.join(allowed)})"
                    raise ctx.err("", f"unknown key [{key}].{key_name(sub)}{hint}")
            continue
        if isinstance(value, dict):
            hint = did_you_mean(key, TABLE_NAMES, "[{}]") or f" (accepted: {', '.join(TABLE_NAMES)})"
            raise ctx.err("", f"unknown table [{key_name(key)}]{hint}")
        near = closest(key, (*TOP_KEYS, *TABLE_NAMES))
        hint = (f"; did you mean {near if near in TOP_KEYS else '[' + str(near) + ']'}?" if near is not None else
                f" (accepted: {', '.join(TOP_KEYS)}, and tables {', '.join('[' + t + ']' for t in TABLE_NAMES)})")
        raise ctx.err("", f"unknown key {key_name(key)}{hint}")


def _workload(ctx: Ctx, w: TomlTable, alias_api: str | None) -> WorkloadSpec:
    """[workload]; [target].api is an alias of its api (the two must agree)."""
    keys = TABLES["workload"].keys
    api_key = keys[0]
    vals = read_keys(ctx, (api_key,), w)
    if alias_api is not None:
        if vals.setdefault("api", alias_api) != alias_api:
            raise ctx.err("[workload].api", f"{vals['api']!r} disagrees with [target].api {alias_api!r} (give one, or the same in both)")
    vals.update(read_keys(ctx, keys[1:], w))
    return build(WorkloadSpec, vals)


def _check_shape(ctx: Ctx, w: WorkloadSpec, r: RampSpec) -> None:
    """The workload and the ramp agree on the load shape."""
    if w.trace is not None and r.speed is None:
        raise ctx.err("[workload].trace", "a trace replays one step per [ramp].speed factor: give speed = [1.0] (or more)")
    if r.speed is not None and w.trace is None:
        raise ctx.err("[ramp].speed", "replays [workload].trace = \"PATH\": give the trace")
    if w.turns > 1 and (r.rate is not None or r.speed is not None or (r.search is not None and r.search.rate_unit is not None)):
        raise ctx.err("[workload].turns", "multi-turn sessions run in concurrency mode (C counts sessions), not with rate or speed")
    if w.think_s > 0 and w.turns == 1:
        raise ctx.err("[workload].think_s", "only used with turns > 1 (the pause between a session's turns)")
    if w.random_range_ratio and (w.trace is not None or w.dataset != "random"):
        raise ctx.err("[workload].random_range_ratio", "spreads the random dataset's lengths: not with a trace or "
                      f"dataset {w.trace or w.dataset!r} (their lengths are their own)")


def _at_least_one(ctx: Ctx, table: str, keys: tuple[Key, ...], data: TomlTable) -> dict[str, object]:
    """[slo] or [guard]: at least one of its bounds (an attainment alone is none)."""
    vals = read_keys(ctx, keys, data)
    bounds = [k.name for k in keys if not k.always]
    if not any(k in vals for k in bounds):
        raise ctx.err(f"[{table}]", f"expected at least one of {', '.join(bounds)}")
    return vals


def _gate(ctx: Ctx, g: object) -> tuple[str, ...]:
    """`[gate] conditions = "knee>=64,errors<=1%"` (or a list of them), or `gate = ...` at the
    top: the conditions of `redline run --headless`'s gate (engine/rules/gate_conditions.py), checked here."""
    from ..rules.gate_conditions import GateError, parse_gate as parse_conditions

    key = "gate"
    if isinstance(g, dict):
        if "conditions" not in g:
            raise ctx.err("[gate]", "expected conditions = \"knee>=64,errors<=1%\" (a string or a list of strings)")
        key, g = "[gate].conditions", g["conditions"]
    if isinstance(g, str):
        g = [g]
    if not isinstance(g, list) or not g or not all(isinstance(x, str) for x in g):
        raise ctx.bad(key, "a string of conditions such as \"knee>=64,errors<=1%\", or a list of such strings", g)
    try:
        conds = parse_conditions(g, flag=key)
    except GateError as exc:
        raise ctx.err("", str(exc)) from None
    return tuple(c.text for c in conds)


def _repeats(ctx: Ctx, r: TomlTable) -> int:
    """[ramp].repeats: the whole ramp run this many times (Preset.repeats)."""
    key = next(k for k in TABLES["ramp"].keys if k.name == "repeats")
    return cast(int, key.read(ctx, r["repeats"])) if key.name in r else 1
