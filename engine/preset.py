"""Preset files: a workload, a ramp of concurrency steps, stop rules and what to do after.

A preset is a TOML file (read with tomllib on 3.11+, tomli before). Every key is checked;
a bad one raises `PresetError`, whose text is one line naming the file, the key and what
would be accepted, e.g.

    presets/x.toml: [ramp].concurrency: expected a non-empty list of positive integers, got []

The key reference lives in docs/presets.md. In short:

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
    durations_s = [12.5, 40, 7]       # replay: exact per-step time (see below)
    [stop]                            # absent rule = off; "server gone" is always on
    plateau_gain = 0.05
    p99_ttft_ms = 10000
    p99_itl_ms = 500
    error_rate = 0.05
    collapse = 0.2
    [after]
    probe_s = 30                      # C=1 probe at the end; 0 = none
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlsplit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from redline.engine.apis import APIS

__all__ = [
    "AfterSpec",
    "DEFAULT_HOLD_S",
    "DEFAULT_MAX_HOLD_FACTOR",
    "DEFAULT_MIN_REQUESTS",
    "DEFAULT_WARMUP_S",
    "MAX_CONCURRENCY",
    "MAX_SECONDS",
    "MAX_STEPS",
    "Preset",
    "PresetError",
    "RampSpec",
    "StepPlan",
    "StopSpec",
    "TargetSpec",
    "WorkloadSpec",
    "check_url",
    "load_preset",
    "parse_preset",
    "preset_to_toml",
    "timeline_preset",
]

DEFAULT_WARMUP_S = 10.0
DEFAULT_HOLD_S = 30.0
DEFAULT_MIN_REQUESTS = 20
DEFAULT_MAX_HOLD_FACTOR = 3.0  # max_hold_s defaults to 3 x hold_s
MAX_CONCURRENCY = 100_000  # a sanity bound on one step's concurrency
MAX_STEPS = 10_000  # a sanity bound on the number of steps in a ramp
MAX_SECONDS = 7 * 24 * 3600.0  # a sanity bound on any time value (one week)

DATASET_KINDS = ("random", "sharegpt", "jsonl")


class PresetError(ValueError):
    """A preset that cannot be used. str() is one line: file, key, what is accepted."""

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


# --------------------------------------------------------------------------- the specs


@dataclass(frozen=True)
class TargetSpec:
    url: str | None = None  # normalised: scheme://host[:port], no trailing slash
    api: str | None = None  # as written in [target].api (an alias of [workload].api)


@dataclass(frozen=True)
class WorkloadSpec:
    api: str = "chat"  # chat | completions | generate
    dataset: str = "random"  # random | sharegpt:/abs/path | jsonl:/abs/path
    input_len: int = 32
    output_len: int = 128
    model: str | None = None

    @property
    def dataset_kind(self) -> str:
        """'random', 'sharegpt' or 'jsonl'."""
        return self.dataset.split(":", 1)[0]

    @property
    def dataset_path(self) -> Path | None:
        """The dataset file (absolute once parsed), or None for 'random'."""
        if ":" not in self.dataset:
            return None
        return Path(self.dataset.split(":", 1)[1])


@dataclass(frozen=True)
class StepPlan:
    """How the runner holds one step of a ramp.

    Warm up for `warmup_s` (not measured), then measure for at least `hold_s`; if fewer than
    `min_requests` requests completed by then, keep measuring until they have or until
    `max_hold_s` of measurement has passed, whichever comes first.
    """

    concurrency: int
    warmup_s: float
    hold_s: float
    min_requests: int
    max_hold_s: float


@dataclass(frozen=True)
class RampSpec:
    concurrency: tuple[int, ...]
    warmup_s: float = DEFAULT_WARMUP_S
    hold_s: float = DEFAULT_HOLD_S
    min_requests: int = DEFAULT_MIN_REQUESTS
    max_hold_s: float = DEFAULT_HOLD_S * DEFAULT_MAX_HOLD_FACTOR
    # Replay mode: step i lasts exactly durations_s[i] seconds, all of it measured,
    # with no warm-up and no min_requests extension. None = a normal ramp.
    durations_s: tuple[float, ...] | None = None

    def steps(self) -> list[StepPlan]:
        """The per-step plan the runner follows, in order."""
        if self.durations_s is not None:
            return [
                StepPlan(c, 0.0, d, 0, d)
                for c, d in zip(self.concurrency, self.durations_s)
            ]
        return [
            StepPlan(c, self.warmup_s, self.hold_s, self.min_requests, self.max_hold_s)
            for c in self.concurrency
        ]

    def duration_bounds(self) -> tuple[float, float]:
        """(shortest, longest) wall time of the whole ramp if no stop rule fires."""
        plans = self.steps()
        lo = sum(p.warmup_s + p.hold_s for p in plans)
        hi = sum(p.warmup_s + p.max_hold_s for p in plans)
        return lo, hi


@dataclass(frozen=True)
class StopSpec:
    """Stop rules; None = that rule is off. "Server gone" is always on (engine/breaker.py)."""

    plateau_gain: float | None = None  # fire when tok/s < best earlier x (1 + gain)
    p99_ttft_ms: float | None = None  # fire when the step's p99 TTFT is over this
    p99_itl_ms: float | None = None  # fire when the step's p99 ITL is over this
    error_rate: float | None = None  # fire when failed / (completed + failed) is over this
    collapse: float | None = None  # fire when tok/s < best earlier x (1 - collapse)

    @property
    def any(self) -> bool:
        return any(
            v is not None
            for v in (
                self.plateau_gain,
                self.p99_ttft_ms,
                self.p99_itl_ms,
                self.error_rate,
                self.collapse,
            )
        )


@dataclass(frozen=True)
class AfterSpec:
    probe_s: float = 0.0  # C=1 probe after the ramp (broken or not); 0 = none


@dataclass(frozen=True)
class Preset:
    name: str
    path: Path | None
    target: TargetSpec
    workload: WorkloadSpec
    ramp: RampSpec
    stop: StopSpec
    after: AfterSpec
    description: str = ""

    def duration_bounds(self) -> tuple[float, float]:
        """(shortest, longest) wall time of ramp + probe if no stop rule fires."""
        lo, hi = self.ramp.duration_bounds()
        return lo + self.after.probe_s, hi + self.after.probe_s


# ------------------------------------------------------------------------------ keys

TOP_KEYS = ("name", "description")
TABLES = ("target", "workload", "ramp", "stop", "after")
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "target": ("url", "api"),
    "workload": ("api", "dataset", "input_len", "output_len", "model"),
    "ramp": (
        "concurrency",
        "start",
        "factor",
        "step",
        "max",
        "warmup_s",
        "hold_s",
        "min_requests",
        "max_hold_s",
        "durations_s",
    ),
    "stop": ("plateau_gain", "p99_ttft_ms", "p99_itl_ms", "error_rate", "collapse"),
    "after": ("probe_s",),
}


# --------------------------------------------------------------------------- helpers


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) if ("\n" in text or "\r" in text) else text


def _show(value: Any, limit: int = 60) -> str:
    """A short one-line repr of a user value for an error message."""
    try:
        text = repr(value)
    except Exception:  # pragma: no cover - TOML values always repr
        text = f"<{type(value).__name__}>"
    text = _one_line(text)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, datetime):
        return "datetime"
    if isinstance(value, date):
        return "date"
    if isinstance(value, time):
        return "time"
    return type(value).__name__


def _num(x: float) -> str:
    """A number as a person writes it: 60 not 60.0, 0.05 not 5e-02."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


class _Ctx:
    """Error context: the source file, for one-line messages."""

    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, key: str, message: str) -> PresetError:
        where = f"{key}: " if key else ""
        return PresetError(f"{self.source}: {where}{message}")

    def bad(self, key: str, expected: str, value: Any) -> PresetError:
        return self.err(key, f"expected {expected}, got {_show(value)}")

    # ---- typed getters

    def integer(self, key: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        if maximum is not None:
            what = f"an integer {minimum}..{maximum}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(key, what, value)
        if value < minimum or (maximum is not None and value > maximum):
            raise self.bad(key, what, value)
        return value

    def number(
        self,
        key: str,
        value: Any,
        *,
        lo: float,
        hi: float,
        lo_open: bool,
        hi_open: bool = False,
        what: str,
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.bad(key, what, value)
        x = float(value)
        if not math.isfinite(x):
            raise self.bad(key, what, value)
        if (x <= lo if lo_open else x < lo) or (x >= hi if hi_open else x > hi):
            raise self.bad(key, what, value)
        return x

    def seconds(self, key: str, value: Any, *, zero_ok: bool) -> float:
        what = (
            f"a number of seconds 0..{_num(MAX_SECONDS)}"
            if zero_ok
            else f"a number of seconds > 0 (at most {_num(MAX_SECONDS)})"
        )
        return self.number(key, value, lo=0.0, hi=MAX_SECONDS, lo_open=not zero_ok, what=what)

    def string(self, key: str, value: Any, what: str = "a non-empty one-line string") -> str:
        if not isinstance(value, str) or not value.strip() or _has_control(value):
            raise self.bad(key, what, value)
        return value


def _has_control(s: str) -> bool:
    return any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in s)


def check_url(url: Any, where: str = "url") -> str:
    """Validate a target URL; return it normalised (no trailing slash).

    Accepted: http(s)://host[:port] with no path other than "" or "/", no query, no
    fragment, no user:password. Raises ValueError (one line, naming the URL) otherwise.
    The CLI's --url uses this too.
    """
    accepted = "http(s)://host[:port] with no path, query or user:password"
    if not isinstance(url, str):
        raise ValueError(f"{where}: expected {accepted}, got {_show(url)}")
    bad = ValueError(f"{where}: expected {accepted}, got {_show(url)}")
    if not url or _has_control(url) or any(ch.isspace() for ch in url):
        raise bad
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a bad port
        host = parts.hostname
    except ValueError:
        raise bad from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise bad
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise bad
    if parts.path not in ("", "/") or parts.query or parts.fragment or url.endswith(("?", "#")):
        raise bad
    if port is not None and not 1 <= port <= 65535:
        raise bad
    if parts.netloc.endswith(":"):  # "http://host:" (empty port)
        raise bad
    return f"{parts.scheme.lower()}://{parts.netloc}"


def _resolve_dataset(ctx: _Ctx, value: Any, base: Path) -> str:
    key = "[workload].dataset"
    accepted = "random, sharegpt:PATH or jsonl:PATH"
    if not isinstance(value, str) or _has_control(value):
        raise ctx.bad(key, accepted, value)
    if value == "random":
        return value
    kind, sep, raw = value.partition(":")
    if not sep or kind not in ("sharegpt", "jsonl") or not raw.strip():
        raise ctx.bad(key, accepted, value)
    try:
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = base / path
        path = path.resolve()
        ok = path.is_file()
    except (OSError, ValueError, RuntimeError):
        ok = False
        path = Path(raw)
    if not ok:
        raise ctx.err(key, f"dataset file not found: {_show(str(path), 200)} (expected {accepted})")
    return f"{kind}:{path}"


# --------------------------------------------------------------------------- parsing


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
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PresetError(f"{source}: not valid TOML: {e}") from None
    except RecursionError:
        raise PresetError(f"{source}: not valid TOML: nested too deeply") from None
    return parse_preset(data, source)


def parse_preset(data: dict, source: str) -> Preset:
    """Check a decoded preset. `source` names the file in errors and anchors relative
    dataset paths (its folder). Only ever raises PresetError."""
    ctx = _Ctx(str(source))
    if not isinstance(data, dict):
        raise ctx.bad("", "a TOML document (a table of tables)", data)

    for key, value in data.items():
        if key in TOP_KEYS:
            continue
        if key in TABLES:
            if not isinstance(value, dict):
                raise ctx.bad(f"[{key}]", "a table", value)
            allowed = TABLE_KEYS[key]
            for sub in value:
                if sub not in allowed:
                    raise ctx.err(
                        "",
                        f"unknown key [{key}].{_key(sub)} (accepted: {', '.join(allowed)})",
                    )
            continue
        if isinstance(value, dict):
            raise ctx.err("", f"unknown table [{_key(key)}] (accepted: {', '.join(TABLES)})")
        raise ctx.err(
            "",
            f"unknown key {_key(key)} (accepted: {', '.join(TOP_KEYS)}, "
            f"and tables {', '.join('[' + t + ']' for t in TABLES)})",
        )

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
    if not isinstance(description, str) or _has_control(description):
        raise ctx.bad("description", "a one-line string", description)

    target, alias_api = _parse_target(ctx, data.get("target", {}))
    workload = _parse_workload(ctx, data.get("workload", {}), alias_api, base)
    if "ramp" not in data:
        raise ctx.err(
            "[ramp]",
            "missing (a preset needs [ramp] with concurrency = [..] or start/factor/max)",
        )
    ramp = _parse_ramp(ctx, data["ramp"])
    stop = _parse_stop(ctx, data.get("stop", {}))
    after = _parse_after(ctx, data.get("after", {}))
    path = Path(str(source)) if source else None
    return Preset(name, path, target, workload, ramp, stop, after, description)


def _key(key: Any) -> str:
    text = str(key)
    if text and all(ch.isalnum() or ch in "_-" for ch in text) and text.isascii():
        return text
    return _show(text)


def _parse_target(ctx: _Ctx, t: dict) -> tuple[TargetSpec, str | None]:
    url = None
    if "url" in t:
        try:
            url = check_url(t["url"], "[target].url")
        except ValueError as e:
            raise ctx.err("", str(e)) from None
    api = None
    if "api" in t:
        api = _api(ctx, "[target].api", t["api"])
    return TargetSpec(url=url, api=api), api


def _api(ctx: _Ctx, key: str, value: Any) -> str:
    if not isinstance(value, str) or value not in APIS:
        raise ctx.bad(key, f"one of {', '.join(APIS)}", value)
    return value


def _parse_workload(ctx: _Ctx, w: dict, alias_api: str | None, base: Path) -> WorkloadSpec:
    api = alias_api or WorkloadSpec.api
    if "api" in w:
        api = _api(ctx, "[workload].api", w["api"])
        if alias_api is not None and alias_api != api:
            raise ctx.err(
                "[workload].api",
                f"{api!r} disagrees with [target].api {alias_api!r} (give one, or the same in both)",
            )
    dataset = WorkloadSpec.dataset
    if "dataset" in w:
        dataset = _resolve_dataset(ctx, w["dataset"], base)
    input_len = WorkloadSpec.input_len
    if "input_len" in w:
        input_len = ctx.integer("[workload].input_len", w["input_len"], maximum=10_000_000)
    output_len = WorkloadSpec.output_len
    if "output_len" in w:
        output_len = ctx.integer("[workload].output_len", w["output_len"], maximum=10_000_000)
    model = None
    if "model" in w:
        model = ctx.string("[workload].model", w["model"])
    return WorkloadSpec(api, dataset, input_len, output_len, model)


def _parse_ramp(ctx: _Ctx, r: Any) -> RampSpec:
    if not isinstance(r, dict):
        raise ctx.bad("[ramp]", "a table", r)
    list_form = "concurrency" in r
    gen_keys = [k for k in ("start", "factor", "step", "max") if k in r]
    if list_form and gen_keys:
        raise ctx.err(
            "[ramp]",
            f"give either concurrency = [..] or start/factor/max (or start/step/max), "
            f"not both (found concurrency and {', '.join(gen_keys)})",
        )
    if not list_form and not gen_keys:
        raise ctx.err(
            "[ramp]",
            "expected concurrency = [..] or start/factor/max (or start/step/max)",
        )

    durations = None
    if "durations_s" in r:
        durations = _durations(ctx, r["durations_s"])

    if list_form:
        conc = _concurrency_list(ctx, r["concurrency"], allow_duplicates=durations is not None)
    else:
        conc = _generated(ctx, r)

    if durations is not None:
        if len(durations) != len(conc):
            raise ctx.err(
                "[ramp].durations_s",
                f"expected one duration per step ({len(conc)}), got {len(durations)}",
            )
        for k in ("hold_s", "min_requests", "max_hold_s"):
            if k in r:
                raise ctx.err(
                    f"[ramp].{k}",
                    "not used with durations_s (each step holds exactly its durations_s "
                    "entry); remove one of them",
                )
        if "warmup_s" in r:
            w = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True)
            if w != 0:
                raise ctx.bad("[ramp].warmup_s", "0 (or absent) with durations_s", r["warmup_s"])
        return RampSpec(
            concurrency=conc,
            warmup_s=0.0,
            hold_s=DEFAULT_HOLD_S,
            min_requests=DEFAULT_MIN_REQUESTS,
            max_hold_s=DEFAULT_HOLD_S * DEFAULT_MAX_HOLD_FACTOR,
            durations_s=durations,
        )

    warmup = DEFAULT_WARMUP_S
    if "warmup_s" in r:
        warmup = ctx.seconds("[ramp].warmup_s", r["warmup_s"], zero_ok=True)
    hold = DEFAULT_HOLD_S
    if "hold_s" in r:
        hold = ctx.seconds("[ramp].hold_s", r["hold_s"], zero_ok=False)
    min_req = DEFAULT_MIN_REQUESTS
    if "min_requests" in r:
        min_req = ctx.integer("[ramp].min_requests", r["min_requests"], maximum=10_000_000)
    if "max_hold_s" in r:
        max_hold = ctx.seconds("[ramp].max_hold_s", r["max_hold_s"], zero_ok=False)
        if max_hold < hold:
            raise ctx.bad(
                "[ramp].max_hold_s", f"a number of seconds >= hold_s ({_num(hold)})", r["max_hold_s"]
            )
    else:
        max_hold = min(hold * DEFAULT_MAX_HOLD_FACTOR, MAX_SECONDS)  # >= hold
    return RampSpec(conc, warmup, hold, min_req, max_hold, None)


_CONC_WHAT = f"a non-empty list of positive integers (at most {MAX_CONCURRENCY})"


def _concurrency_list(ctx: _Ctx, value: Any, *, allow_duplicates: bool) -> tuple[int, ...]:
    key = "[ramp].concurrency"
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, _CONC_WHAT, value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    out: list[int] = []
    for i, c in enumerate(value):
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_CONCURRENCY:
            raise ctx.err(key, f"expected {_CONC_WHAT}, got {_show(c)} at position {i + 1}")
        out.append(c)
    if not allow_duplicates:
        seen: set[int] = set()
        for c in out:
            if c in seen:
                raise ctx.err(
                    key,
                    f"expected each concurrency once, got {c} twice in {_show(value)} "
                    "(repeats are allowed only with durations_s)",
                )
            seen.add(c)
    return tuple(out)


def _durations(ctx: _Ctx, value: Any) -> tuple[float, ...]:
    key = "[ramp].durations_s"
    what = f"a non-empty list of seconds > 0 (each at most {_num(MAX_SECONDS)})"
    if not isinstance(value, list) or not value:
        raise ctx.bad(key, what, value)
    if len(value) > MAX_STEPS:
        raise ctx.err(key, f"expected at most {MAX_STEPS} steps, got {len(value)}")
    out = []
    for i, d in enumerate(value):
        ok = (
            not isinstance(d, bool)
            and isinstance(d, (int, float))
            and math.isfinite(float(d))
            and 0 < float(d) <= MAX_SECONDS
        )
        if not ok:
            raise ctx.err(key, f"expected {what}, got {_show(d)} at position {i + 1}")
        out.append(float(d))
    return tuple(out)


def _generated(ctx: _Ctx, r: dict) -> tuple[int, ...]:
    if "start" not in r:
        raise ctx.err("[ramp].start", "missing (start/factor/max or start/step/max needs all three)")
    if "max" not in r:
        raise ctx.err("[ramp].max", "missing (start/factor/max or start/step/max needs all three)")
    if "factor" in r and "step" in r:
        raise ctx.err(
            "[ramp]",
            "give factor (geometric: start, start x factor, ...) or step "
            "(additive: start, start + step, ...), not both",
        )
    if "factor" not in r and "step" not in r:
        raise ctx.err(
            "[ramp].factor",
            "missing (start/max needs factor = number > 1, or step = positive integer)",
        )
    start = ctx.integer("[ramp].start", r["start"], maximum=MAX_CONCURRENCY)
    top = ctx.integer("[ramp].max", r["max"], maximum=MAX_CONCURRENCY)
    if top < start:
        raise ctx.bad("[ramp].max", f"an integer >= start ({start})", r["max"])
    if "step" in r:
        step = ctx.integer("[ramp].step", r["step"], maximum=MAX_CONCURRENCY)
        n = (top - start) // step + 1
        if n > MAX_STEPS:
            raise ctx.err("[ramp]", f"start/step/max gives {n} steps, at most {MAX_STEPS} accepted")
        return tuple(range(start, top + 1, step))
    factor = ctx.number(
        "[ramp].factor", r["factor"], lo=1.0, hi=1e6, lo_open=True,
        what="a number > 1 (e.g. 2 for 1, 2, 4, ...)",
    )
    out = [start]
    value = float(start)
    while True:
        value *= factor
        if value > top + 0.5:  # also catches inf
            break
        # start x factor^k rounded half up; bumped by one when rounding would repeat a step
        c = max(math.floor(value + 0.5), out[-1] + 1)
        if c > top:
            break
        out.append(c)
        if len(out) > MAX_STEPS:
            raise ctx.err(
                "[ramp]", f"start/factor/max gives more than {MAX_STEPS} steps, at most {MAX_STEPS} accepted"
            )
    return tuple(out)


def _parse_stop(ctx: _Ctx, s: dict) -> StopSpec:
    vals: dict[str, float | None] = {}
    frac = {
        "plateau_gain": (0.0, 1.0, False, False, "a fraction 0..1 (0.05 = 5 % more tok/s than the best before)"),
        "error_rate": (0.0, 1.0, False, True, "a fraction 0 <= x < 1 (0.05 = 5 % of requests failed)"),
        "collapse": (0.0, 1.0, True, True, "a fraction 0 < x < 1 (0.2 = tok/s 20 % below the best step)"),
    }
    for key in StopSpec.__dataclass_fields__:
        if key not in s:
            vals[key] = None
        elif key in frac:
            lo, hi, lo_open, hi_open, what = frac[key]
            vals[key] = ctx.number(
                f"[stop].{key}", s[key], lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, what=what
            )
        else:
            vals[key] = ctx.number(
                f"[stop].{key}", s[key], lo=0.0, hi=math.inf, lo_open=True,
                what="a number of milliseconds > 0",
            )
    return StopSpec(**vals)


def _parse_after(ctx: _Ctx, a: dict) -> AfterSpec:
    probe = 0.0
    if "probe_s" in a:
        probe = ctx.seconds("[after].probe_s", a["probe_s"], zero_ok=True)
    return AfterSpec(probe_s=probe)


# --------------------------------------------------------------------------- writing


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
    text = repr(x)
    return text


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


def preset_to_toml(preset: Preset, header: str | None = None) -> str:
    """A preset as TOML text (commented) that load_preset reads back to an equal Preset
    (apart from `path`). `header` adds comment lines at the top. A ramp is always written
    as its concurrency list (start/factor/max expanded)."""
    from redline.engine import __version__

    lines: list[str] = [f"# redline preset: {_one_line(preset.name)}"]
    if header:
        lines += [f"# {h}".rstrip() for h in header.splitlines()]
    lines += [f"# Written by redline {__version__}. Every key: docs/presets.md.", ""]
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

    r = preset.ramp
    lines += ["", "[ramp]"]
    lines.append(_kv("concurrency", _toml_list(r.concurrency), "one step per entry, in order"))
    if r.durations_s is not None:
        lines.append("# replay: each step lasts exactly its duration, all of it measured,")
        lines.append("# no warm-up and no min_requests extension")
        lines.append(_kv("durations_s", _toml_list(r.durations_s, per_line=8)))
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


def _timeline_url(url: str | None) -> str | None:
    if url is None:
        return None
    try:
        return check_url(url, "timeline: target url")
    except ValueError as e:
        raise PresetError(str(e)) from None


def timeline_preset(
    name: str,
    target_url: str | None,
    workload: WorkloadSpec,
    concurrency_timeline: list[tuple[float, int]],
    *,
    end_s: float | None = None,
    description: str | None = None,
) -> str:
    """A preset (TOML text) that replays a recorded session's concurrency timeline.

    `concurrency_timeline` is a list of (t_s, C) change points: at t_s seconds (any origin)
    the concurrency became C. Each point lasts until the next; the last lasts until `end_s`,
    or, when end_s is None, the last point only marks the end (its C is ignored: a session's
    timeline naturally ends with (t_end, 0)). Periods at C <= 0 (paused) are left out,
    consecutive equal C merge. The result has [ramp].concurrency + durations_s, no stop
    rules and no probe. Raises ValueError (PresetError) for a timeline with nothing to replay
    or a bad URL.
    """
    pts = sorted(
        ((float(t), int(c)) for t, c in concurrency_timeline), key=lambda p: p[0]
    )
    if any(not math.isfinite(t) for t, _ in pts):
        raise PresetError("timeline: times must be finite numbers of seconds")
    if end_s is not None:
        pts.append((float(end_s), 0))
    segs: list[tuple[int, float]] = []
    for (t0, c), (t1, _) in zip(pts, pts[1:]):
        d = t1 - t0
        if c <= 0 or d <= 0:
            continue
        c = min(c, MAX_CONCURRENCY)
        if segs and segs[-1][0] == c:
            segs[-1] = (c, segs[-1][1] + d)
        else:
            segs.append((c, d))
    segs = [(c, round(d, 3)) for c, d in segs]
    segs = [(c, min(d, MAX_SECONDS)) for c, d in segs if d > 0]
    if not segs:
        raise PresetError("timeline: nothing to replay (no period with concurrency >= 1)")
    if len(segs) > MAX_STEPS:
        raise PresetError(f"timeline: {len(segs)} steps, at most {MAX_STEPS} can be replayed")
    total = sum(d for _, d in segs)
    preset = Preset(
        name=name,
        path=None,
        target=TargetSpec(url=_timeline_url(target_url)),
        workload=workload,
        ramp=RampSpec(
            concurrency=tuple(c for c, _ in segs),
            warmup_s=0.0,
            durations_s=tuple(float(d) for _, d in segs),
        ),
        stop=StopSpec(),
        after=AfterSpec(probe_s=0.0),
        description=description
        if description is not None
        else f"replay of a recorded session: {len(segs)} steps, {total:.0f} s",
    )
    text = preset_to_toml(
        preset,
        header="Replays a recorded session's concurrency timeline (redline preset-from).",
    )
    # Prove it reads back; raises PresetError (e.g. a dataset file that is gone).
    parse_preset(tomllib.loads(text), f"<timeline {name}>")
    return text
