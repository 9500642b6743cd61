"""Reading a preset: TOML text in, a checked `Preset` out, or one line saying what is wrong.

Every key is checked (docs/presets.md, lists them all); unknown tables and keys are errors.
A bad one raises PresetError naming the file, the key and what is accepted. In short:

    name = "until-it-breaks"          # optional; default: the file name without .toml
    description = "..."               # optional; one line, shown in the preset picker
    [target]                          # optional; --url overrides
    url = "http://127.0.0.1:30000"
    api = "chat"                      # alias of [workload].api
    [workload]
    api = "chat"                      # chat | completions | generate
    dataset = "random"                # random | sharegpt:PATH | jsonl:PATH
    input_len = 1024
    output_len = 2048
    model = "..."                     # optional; default: what the server says it serves
    [ramp]                            # required
    concurrency = [32, 64, 96]        # or start/factor/max, or start/step/max
    warmup_s = 10                     # not measured; 0 allowed
    hold_s = 30                       # measured window per step, at least
    min_requests = 20                 # keep holding until this many completed ...
    max_hold_s = 90                   # ... but no longer than this (default 3 x hold_s)
    durations_s = [12.5, 40, 7]       # replay: exact per-step time (see replay.py)
    [stop]                            # absent rule = off; "server gone" and "stalled" are always on
    plateau_gain = 0.05
    p99_ttft_ms = 10000
    p99_itl_ms = 500
    error_rate = 0.05
    collapse = 0.2
    stall_s = 10                      # "stalled": in flight, no token this long (default 10)
    [after]
    probe_s = 30                      # C=1 probe at the end; 0 = none
    [gate]                            # optional; CI conditions of a headless run (engine/report/gate.py)
    conditions = ["knee>=64", "errors<=1%"]   # or a string; --gate replaces them

The tables are read by one module each; this one checks the document's shape (no unknown
tables or keys) and assembles the Preset:

    parse_workload.py   [target], [workload], and that they agree with the ramp's shape
    parse_ramp.py       [ramp]: picks the form; the concurrency list, generated and replay forms
    parse_open_loop.py  [ramp] rate = [..] and speed = [..]
    parse_search.py     [ramp] mode = "search"
    ramp_fields.py      the [ramp] values those forms share (step lists, hold keys, rates)
    parse_rules.py      [stop], [slo], [guard], [gate], [after]
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from ..text import closest, did_you_mean
from .fields import Ctx, has_control, key_name
from .parse_ramp import parse_ramp
from .parse_rules import parse_after, parse_gate, parse_guard, parse_slo, parse_stop
from .parse_search import RATE_SEARCH_LEVELS
from .parse_server_ops import SERVER_OPS_KEYS, parse_server_ops
from .parse_workload import MAX_TURNS, check_shape, parse_target, parse_workload
from .ramp_fields import RATE_WHAT
from .spec import MAX_REPEATS, Preset, PresetError

__all__ = [
    "MAX_TURNS",
    "RATE_SEARCH_LEVELS",
    "RATE_WHAT",
    "TABLES",
    "TABLE_KEYS",
    "TOP_KEYS",
    "load_preset",
    "parse_preset",
    "parse_toml",
]

TOP_KEYS = ("name", "description")
TABLES = ("target", "workload", "ramp", "stop", "after", "slo", "guard", "gate")
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "target": ("url", "api"),
    "workload": ("api", "dataset", "input_len", "output_len", "model", "turns", "think_s", "trace",
                 "headers", "extra_body", "ignore_eos", "random_range_ratio", "seed"),
    "ramp": (
        "concurrency",
        "start",
        "factor",
        "step",
        "max",
        "warmup_s",
        "hold_s",
        "min_requests",
        "num_requests",
        "max_hold_s",
        "durations_s",
        "mode",
        "resolution",
        "rate",
        "arrival",
        "max_concurrency",
        "speed",
        "over",
        "workloads",
        "probes",
        "repeats",
        *SERVER_OPS_KEYS,  # profile, flush_cache (parse_server_ops.py)
    ),
    "slo": ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "attainment"),
    "guard": ("error_rate", "ttft_p99_ms", "gpu_temp_c"),
    "gate": ("conditions",),
    "stop": ("plateau_gain", "p99_ttft_ms", "p99_itl_ms", "error_rate", "collapse", "stall_s"),
    "after": ("probe_s",),
}


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


def parse_preset(data: dict, source: str) -> Preset:
    """Check a decoded preset. `source` names the file in errors and anchors relative
    dataset paths (its folder). Only ever raises PresetError."""
    ctx = Ctx(str(source))
    if not isinstance(data, dict):
        raise ctx.bad("", "a TOML document (a table of tables)", data)

    for key, value in data.items():
        if key in TOP_KEYS or (key == "gate" and not isinstance(value, dict)):
            continue  # gate = "knee>=64" (or a list): checked by parse_gate
        if key in TABLES:
            if not isinstance(value, dict):
                raise ctx.bad(f"[{key}]", "a table", value)
            allowed = TABLE_KEYS[key]
            for sub in value:
                if sub not in allowed:
                    # `; did you mean p99_ttft_ms?` when one is close, else every accepted key
                    hint = did_you_mean(sub, allowed) or f" (accepted: {', '.join(allowed)})"
                    raise ctx.err("", f"unknown key [{key}].{key_name(sub)}{hint}")
            continue
        if isinstance(value, dict):
            hint = did_you_mean(key, TABLES, "[{}]") or f" (accepted: {', '.join(TABLES)})"
            raise ctx.err("", f"unknown table [{key_name(key)}]{hint}")
        near = closest(key, (*TOP_KEYS, *TABLES))
        hint = (f"; did you mean {near if near in TOP_KEYS else '[' + str(near) + ']'}?" if near is not None else
                f" (accepted: {', '.join(TOP_KEYS)}, and tables {', '.join('[' + t + ']' for t in TABLES)})")
        raise ctx.err("", f"unknown key {key_name(key)}{hint}")

    try:
        base = Path(str(source)).expanduser().resolve().parent
    except (OSError, ValueError, RuntimeError):
        base = Path.cwd()

    name = data.get("name")
    if name is None:
        name = Path(str(source)).stem or str(source)
    else:
        name = ctx.string("name", name)
    description = data.get("description", "")
    if not isinstance(description, str) or has_control(description):
        raise ctx.bad("description", "a one-line string", description)

    target, alias_api = parse_target(ctx, data.get("target", {}))
    workload = parse_workload(ctx, data.get("workload", {}), alias_api, base)
    if "ramp" not in data:
        raise ctx.err(
            "[ramp]",
            "missing (a preset needs [ramp] with concurrency = [..] or start/factor/max)",
        )
    ramp = parse_server_ops(ctx, data["ramp"], parse_ramp(ctx, data["ramp"]))
    check_shape(ctx, workload, ramp)
    stop = parse_stop(ctx, data.get("stop", {}))
    after = parse_after(ctx, data.get("after", {}))
    slo = parse_slo(ctx, data["slo"]) if "slo" in data else None
    guard = parse_guard(ctx, data["guard"]) if "guard" in data else None
    gate = parse_gate(ctx, data["gate"]) if "gate" in data else None
    path = Path(str(source)) if source else None
    repeats = ctx.integer("[ramp].repeats", data["ramp"]["repeats"], maximum=MAX_REPEATS) if "repeats" in data["ramp"] else 1
    return Preset(name, path, target, workload, ramp, stop, after, description, slo, guard, gate, repeats)
