"""Writing a preset: a `Preset` as commented TOML text that parse.py reads back to an equal one."""

from __future__ import annotations

from typing import Iterable

from redline.engine import __version__

from .spec import Preset, StopSpec, one_line


def _toml_str(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_num(x: float | int) -> str:
    if isinstance(x, bool):  # pragma: no cover - never written
        raise TypeError("bool")
    if isinstance(x, int):
        return str(x)
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


def _toml_list(xs: Iterable[float | int], per_line: int = 16) -> str:
    items = [_toml_num(x) for x in xs]
    if len(items) <= per_line:
        return "[" + ", ".join(items) + "]"
    lines = [
        "    " + ", ".join(items[i : i + per_line]) + ","
        for i in range(0, len(items), per_line)
    ]
    return "[\n" + "\n".join(lines) + "\n]"


def _kv(key: str, value: str, comment: str = "") -> str:
    line = f"{key} = {value}"
    if comment and "\n" not in value:
        line = f"{line:<29} # {comment}"
    return line


def _inline(w: dict | None) -> str:
    if not w:
        return "{}"
    items = [f"{k} = {_toml_str(v) if isinstance(v, str) else _toml_num(v)}" for k, v in w.items()]
    return "{ " + ", ".join(items) + " }"


def preset_to_toml(preset: Preset, header: str | None = None) -> str:
    """A preset as TOML text (commented) that load_preset reads back to an equal Preset
    (apart from `path`). `header` adds comment lines at the top. A ramp is always written
    as its concurrency list (start/factor/max expanded)."""
    lines: list[str] = [f"# redline preset: {one_line(preset.name)}"]
    if header:
        lines += [f"# {h}".rstrip() for h in header.splitlines()]
    lines += [f"# Written by redline {__version__}. Every key: README, section Presets.", ""]
    lines.append(_kv("name", _toml_str(preset.name)))
    if preset.description:
        lines.append(_kv("description", _toml_str(preset.description)))

    t = preset.target
    if t.url is not None or t.api is not None:
        lines += ["", "[target]                      # --url overrides"]
        if t.url is not None:
            lines.append(_kv("url", _toml_str(t.url)))
        if t.api is not None:
            lines.append(_kv("api", _toml_str(t.api), "alias of [workload].api"))

    w = preset.workload
    lines += [
        "",
        "[workload]",
        _kv("api", _toml_str(w.api), "chat | completions | generate"),
        _kv("dataset", _toml_str(w.dataset), "random | sharegpt:PATH | jsonl:PATH"),
        _kv("input_len", str(w.input_len), "prompt tokens (random dataset)"),
        _kv("output_len", str(w.output_len), "max_tokens, generated in full"),
    ]
    if w.model is not None:
        lines.append(_kv("model", _toml_str(w.model)))
    if w.turns > 1:
        lines.append(_kv("turns", str(w.turns), "multi-turn: C counts sessions"))
        lines.append(_kv("think_s", _toml_num(w.think_s), "pause between a session's turns"))
    if w.trace is not None:
        lines.append(_kv("trace", _toml_str(w.trace), "Mooncake JSONL, replayed per [ramp].speed"))

    r = preset.ramp
    lines += ["", "[ramp]"]
    if r.search is not None:
        sp = r.search
        lines.append(_kv("mode", '"search"', "an adaptive knee search"))
        if sp.rate_unit is not None:
            lines.append(_kv("over", '"rate"', "start and max in req/s"))
            lines.append(_kv("start", _toml_num(round(sp.start * sp.rate_unit, 6))))
            lines.append(_kv("max", _toml_num(round(sp.max * sp.rate_unit, 6))))
        else:
            lines.append(_kv("start", str(sp.start)))
            lines.append(_kv("max", str(sp.max)))
        lines.append(_kv("resolution", _toml_num(sp.resolution)))
        lines.append(_kv("factor", _toml_num(sp.factor)))
    elif r.speed is not None:
        lines.append(_kv("speed", _toml_list(r.speed), "one trace replay per factor"))
    elif r.rate is not None and r.durations_s is None:
        lines.append(_kv("rate", _toml_list(r.rate), "req/s, one open-loop step per entry"))
    else:
        lines.append(_kv("concurrency", _toml_list(r.concurrency), "one step per entry, in order"))
        if r.rate is not None:
            lines.append(_kv("rate", _toml_list(r.rate), "req/s; 0 = that step held its concurrency"))
    if r.rate is not None or r.speed is not None or (r.search is not None and r.search.rate_unit is not None):
        if r.speed is None:
            lines.append(_kv("arrival", _toml_str(r.arrival), "poisson | constant | gamma:K"))
        if r.max_concurrency is not None:
            lines.append(_kv("max_concurrency", str(r.max_concurrency), "in-flight cap of the open loop"))
    if r.durations_s is not None:
        lines.append("# replay: each step lasts exactly its duration, all of it measured,")
        lines.append("# no warm-up and no min_requests extension")
        lines.append(_kv("durations_s", _toml_list(r.durations_s, per_line=8)))
        if r.workloads is not None:
            lines.append("# the workload of each step ({} = [workload]'s): the session changed it live")
            lines.append("workloads = [\n" + "\n".join(f"    {_inline(w)}," for w in r.workloads) + "\n]")
    elif r.speed is not None:
        lines += [
            _kv("warmup_s", _toml_num(r.warmup_s), "per replay, not measured"),
            _kv("hold_s", _toml_num(r.hold_s), "at least (a replay lasts until every row is answered)"),
            _kv("max_hold_s", _toml_num(r.max_hold_s), "at most"),
        ]
    else:
        lines += [
            _kv("warmup_s", _toml_num(r.warmup_s), "per step, not measured"),
            _kv("hold_s", _toml_num(r.hold_s), "per step, measured (at least)"),
            _kv("min_requests", str(r.min_requests), "keep holding until this many completed"),
            _kv("max_hold_s", _toml_num(r.max_hold_s), "... but measure no longer than this"),
        ]

    s = preset.stop
    lines += ["", "[stop]                        # any rule that fires ends the ramp; absent = off"]
    comments = {
        "plateau_gain": "step gave less than this much more tok/s than the best before",
        "p99_ttft_ms": "p99 time to first token over this",
        "p99_itl_ms": "p99 inter-token latency over this",
        "error_rate": "failed / (completed + failed) over this",
        "collapse": "tok/s fell more than this below the best step",
    }
    for key in StopSpec.__dataclass_fields__:
        v = getattr(s, key)
        if v is not None:
            lines.append(_kv(key, _toml_num(v), comments[key]))

    lines += [
        "",
        "[after]",
        _kv("probe_s", _toml_num(preset.after.probe_s), "C=1 probe at the end; 0 = none"),
        "",
    ]
    return "\n".join(lines)
