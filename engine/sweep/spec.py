"""A sweep over server configurations (`redline sweep`): what to launch for each, and which.

    redline sweep --serve 'python -m sglang.launch_server --model M --port {port} --tp {tp} --pp {pp}' \
        --grid 'tp=8,pp=1' --grid 'tp=1,pp=8' --preset until-it-breaks --headless --out runs/pp-study

- `--serve CMD`: the server's command line; `{port}` is a free port picked for each
  configuration (or `--port N`), `{NAME}` a grid value. The URL is `http://127.0.0.1:{port}`
  unless `--url-template` says otherwise (a remote host started by `ssh gpu-host ...`).
- `--grid 'a=1,b=2'`: one configuration; `--grid 'mb=8|16|64'` one per value, several such
  keys in one `--grid` their cartesian product (with its fixed values). Each `--grid` expands
  on its own; the sweep is the union of the expansions, in order; a configuration that
  appears twice is refused.
- `--url URL` (repeated) instead of `--serve`: the same preset against servers already running,
  one after another (nothing is launched).
- A `[sweep]` table in a TOML file says the same: `serve`, `configs = [{tp = 8, pp = 1}, ...]`
  or `grid = {mb = [8, 16, 64]}`, `preset`, `ready_timeout_s`, `cooldown_s` (and `url_template`,
  `port`, `urls`); `redline sweep FILE.toml` runs it, flags override it.

Everything is checked before anything starts (SweepError: one line): a `{name}` no grid sets,
a grid value no `{name}` uses, no `{port}` without `--port` or `--url-template`, a
configuration given twice.
"""

from __future__ import annotations

import itertools
import re
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ..preset.spec import MAX_REPEATS

DEFAULT_READY_TIMEOUT_S = 900.0
DEFAULT_COOLDOWN_S = 0.0
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SWEEP_KEYS = ("serve", "configs", "grid", "preset", "ready_timeout_s", "cooldown_s", "url_template", "port", "urls",
              "repeats", "restart_each", "gpus")


class SweepError(ValueError):
    """A bad sweep value: one line naming it and what is accepted."""


@dataclass(frozen=True)
class Config:
    """One server configuration: its values (the grid's), its label, its command and URL."""

    values: dict[str, str]
    label: str
    command: tuple[str, ...] = ()  # empty: a server already running (--url)
    url: str = ""
    port: int | None = None
    # the templates its command and URL came from, when its port was picked (free_port), not
    # given: `on_port` renders them again with another port (ConfigServer.launch)
    serve: str = ""
    url_template: str = ""

    def describe(self) -> str:
        return " ".join(shlex.quote(a) for a in self.command) if self.command else self.url

    @property
    def port_picked(self) -> bool:
        """Its port is redline's pick, not the operator's (`--port`): another is as good."""
        return bool(self.serve) and self.port is not None

    def on_port(self, port: int) -> Config:
        """The same configuration on another picked port."""
        command, url = render(self.serve, self.url_template, {**self.values, "port": str(port)})
        return replace(self, command=command, url=url, port=port)


@dataclass
class SweepSpec:
    serve: str | None = None
    configs: list[dict[str, str]] = field(default_factory=list)  # explicit configurations (--grid a=1,b=2)
    grid: dict[str, list[str]] = field(default_factory=dict)  # a [sweep] file's grid table: its product, after configs
    urls: list[str] = field(default_factory=list)
    preset: str | None = None
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    cooldown_s: float = DEFAULT_COOLDOWN_S
    url_template: str | None = None
    port: int | None = None
    repeats: int = 1  # the preset's runs per configuration (--repeats)
    restart_each: bool = False  # relaunch the server before each repeat (--restart-each)
    gpus: int | None = None  # GPUs of each configuration when its server does not say (--gpus)

    def placeholders(self) -> list[str]:
        return [] if self.serve is None else list(dict.fromkeys(PLACEHOLDER.findall(self.serve)))

    def value_sets(self) -> list[dict[str, str]]:
        """Every configuration's values, in order: the explicit ones (each `--grid`, already
        expanded on its own), then the [sweep] file's `grid` table's product. The sweep is
        their union: nothing is crossed with anything else."""
        keys = list(self.grid)
        product = [dict(zip(keys, vals, strict=False)) for vals in itertools.product(*(self.grid[k] for k in keys))] if keys else []
        out = [dict(c) for c in self.configs] + product
        return [v for v in out if v] or ([] if self.serve is not None else [{}])

    def check(self) -> None:
        """Everything a sweep needs, before anything starts (SweepError)."""
        if self.serve is None and not self.urls:
            raise SweepError("redline sweep: give --serve CMD with --grid values (or a [sweep] file), or --url URL (repeated)")
        if self.serve is not None and self.urls:
            raise SweepError("redline sweep: --serve launches each server, --url uses ones already running: give one of them")
        if self.ready_timeout_s <= 0:
            raise SweepError(f"--ready-timeout {self.ready_timeout_s:g}: expected seconds > 0")
        if self.cooldown_s < 0:
            raise SweepError(f"--cooldown {self.cooldown_s:g}: expected seconds >= 0")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or not 1 <= self.repeats <= MAX_REPEATS:
            raise SweepError(f"--repeats {self.repeats!r}: expected a whole number 1-{MAX_REPEATS}")
        if self.gpus is not None and (isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1):
            raise SweepError(f"--gpus {self.gpus!r}: expected a whole number >= 1 (the GPUs each configuration's server uses)")
        if self.restart_each and self.serve is None:
            raise SweepError("--restart-each: relaunches each configuration's server before each repeat; with --url nothing is launched (give --serve)")
        if self.serve is None:
            return
        names = self.placeholders()
        sets = self.value_sets()
        if not sets:
            raise SweepError(f"--serve {self.serve!r}: no configuration: give --grid NAME=VALUE (repeated) or a [sweep] grid")
        seen: dict[tuple, int] = {}
        for i, s in enumerate(sets):
            key = tuple(sorted(s.items()))
            if key in seen:
                one = ",".join(f"{k}={v}" for k, v in s.items())
                raise SweepError(f"--grid: the configuration {one!r} appears twice (configurations {seen[key] + 1} and {i + 1}); "
                                 "each --grid expands on its own and the sweep is their union: give each configuration once")
            seen[key] = i
        given = set().union(*(s.keys() for s in sets))
        for n in names:
            if n == "port":
                continue
            missing = [s for s in sets if n not in s]
            if len(missing) == len(sets):
                raise SweepError(f"--serve: {{{n}}} is set by no --grid (grids set: {', '.join(sorted(given)) or 'none'}); "
                                 f"add {n}=VALUE to each --grid")
            if missing:  # some configurations set it, this one not
                one = ",".join(f"{k}={v}" for k, v in missing[0].items())
                raise SweepError(f"--serve: {{{n}}} is not set in the configuration {one!r} (each --grid is one "
                                 f"configuration: add {n}=VALUE to it)")
        unused = sorted(given - set(names))
        if unused:
            raise SweepError(f"--grid: {unused[0]}= is set but --serve has no {{{unused[0]}}} "
                             f"(its placeholders: {', '.join('{' + n + '}' for n in names) or 'none'})")
        if "port" not in names and self.port is None and self.url_template is None:
            raise SweepError("--serve: no {port} in the command: add --port N (the port it serves on), or --url-template URL")
        if self.port is not None and not 1 <= self.port <= 65535:
            raise SweepError(f"--port {self.port}: expected a port 1-65535")

    def expand(self, free_port: Callable[[], int]) -> list[Config]:
        """The configurations, in order, each with its command and URL (`free_port()`: a
        free port for each, when the command takes {port} and no --port is given)."""
        self.check()
        if self.serve is None:
            return [Config({"url": u}, label_of({"url": u}, i), (), u.rstrip("/")) for i, u in enumerate(self.urls)]
        out = []
        seen: dict[str, int] = {}
        url_template = self.url_template or "http://127.0.0.1:{port}"
        for values in self.value_sets():
            picked = self.port is None and "{port}" in self.serve
            port = self.port if self.port is not None else (free_port() if picked else None)
            command, url = render(self.serve, url_template, {**values, **({"port": str(port)} if port is not None else {})})
            label = label_of(values, 0)
            n = seen.get(label, 0)
            seen[label] = n + 1
            if n:
                label = f"{label}-{n + 1}"
            out.append(Config(dict(values), label, command, url, port, *((self.serve, url_template) if picked else ())))
        return out


def render(serve: str, url_template: str, fill: dict[str, str]) -> tuple[tuple[str, ...], str]:
    """A configuration's command and URL from the templates and its values (and port)."""
    command = tuple(shlex.split(PLACEHOLDER.sub(lambda m: fill[m.group(1)], serve)))
    return command, PLACEHOLDER.sub(lambda m: fill.get(m.group(1), m.group(0)), url_template)


def label_of(values: dict[str, str], index: int) -> str:
    """`tp8-pp1-mb64` from {tp: 8, pp: 1, mb: 64}; a URL's host and port for --url."""
    if set(values) == {"url"}:
        host = re.sub(r"^[a-z]+://", "", values["url"]).rstrip("/").replace(":", "-").replace("/", "-")
        return f"{index + 1}-{host}"
    safe = [f"{k}{re.sub(r'[^A-Za-z0-9_.]+', '_', v)}" for k, v in values.items()]
    return "-".join(safe) or f"config{index + 1}"


def parse_grid(text: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """`tp=8,pp=1` -> ({tp: 8, pp: 1}, {}); `mb=8|16|64` -> ({}, {mb: [8, 16, 64]})."""
    fixed: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise SweepError(f"--grid {text!r}: expected NAME=VALUE pairs separated by commas, e.g. tp=8,pp=1 or mb=8|16|64")
    for part in parts:
        name, eq, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not NAME.match(name) or not value:
            raise SweepError(f"--grid {text!r}: {part!r} is not NAME=VALUE (e.g. tp=8, or mb=8|16|64 for one configuration per value)")
        if name in fixed or name in multi:
            raise SweepError(f"--grid {text!r}: {name} is set twice")
        vals = [v.strip() for v in value.split("|")]
        if any(not v for v in vals):
            raise SweepError(f"--grid {text!r}: {name}={value}: an empty value between |")
        if len(vals) == 1:
            fixed[name] = vals[0]
        else:
            multi[name] = vals
    return fixed, multi


def expand_grid(text: str) -> list[dict[str, str]]:
    """One `--grid` on its own: `tp=8,pp=1` one configuration, `mb=8|64` one per value,
    `tp=1,mb=8|64,n=2|4` the fixed values with each of the lists' product."""
    fixed, multi = parse_grid(text)
    if not multi:
        return [fixed]
    return [{**fixed, **dict(zip(multi, vals, strict=False))} for vals in itertools.product(*multi.values())]


def spec_from_args(grids: Sequence[str], **kw: Any) -> SweepSpec:
    """A SweepSpec from `--grid` strings and the other flags (None: not given). Each `--grid`
    expands on its own; the sweep is their union, in order (a configuration twice is refused
    by `check`)."""
    spec = SweepSpec(**{k: v for k, v in kw.items() if v is not None})
    for g in grids:
        spec.configs.extend(expand_grid(g))
    return spec


def load_sweep_file(path: str | Path) -> SweepSpec:
    """The `[sweep]` table of a TOML file (a preset file may hold it beside its own tables)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib

    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SweepError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SweepError(f"{p}: not valid TOML ({exc})") from None
    t = data.get("sweep")
    if not isinstance(t, dict):
        raise SweepError(f"{p}: no [sweep] table (expected serve, configs or grid, preset, ...)")
    unknown = sorted(set(t) - set(SWEEP_KEYS))
    if unknown:
        from difflib import get_close_matches

        near = get_close_matches(unknown[0], SWEEP_KEYS, n=1)
        hint = f"; did you mean {near[0]}?" if near else f" (keys: {', '.join(SWEEP_KEYS)})"
        raise SweepError(f"{p}: unknown key [sweep].{unknown[0]}{hint}")
    spec = SweepSpec()
    if "serve" in t:
        spec.serve = _str(p, "serve", t["serve"])
    for i, c in enumerate(t.get("configs", [])):
        if not isinstance(c, dict) or not c:
            raise SweepError(f"{p}: [sweep].configs[{i}]: expected a table such as {{tp = 8, pp = 1}}")
        spec.configs.append({str(k): _value(p, f"configs[{i}].{k}", v) for k, v in c.items()})
    grid = t.get("grid", {})
    if not isinstance(grid, dict):
        raise SweepError(f"{p}: [sweep].grid: expected a table such as {{mb = [8, 16, 64]}}")
    for k, vals in grid.items():
        if not isinstance(vals, list) or not vals:
            raise SweepError(f"{p}: [sweep].grid.{k}: expected a non-empty list such as [8, 16, 64]")
        spec.grid[str(k)] = [_value(p, f"grid.{k}", v) for v in vals]
    if "preset" in t:
        spec.preset = _str(p, "preset", t["preset"])
    for key in ("ready_timeout_s", "cooldown_s"):
        if key in t:
            v = t[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SweepError(f"{p}: [sweep].{key}: expected seconds, got {v!r}")
            setattr(spec, key, float(v))
    if "url_template" in t:
        spec.url_template = _str(p, "url_template", t["url_template"])
    if "port" in t:
        if not isinstance(t["port"], int) or isinstance(t["port"], bool):
            raise SweepError(f"{p}: [sweep].port: expected a port number, got {t['port']!r}")
        spec.port = t["port"]
    for key in ("repeats", "gpus"):
        if key in t:
            if not isinstance(t[key], int) or isinstance(t[key], bool):
                raise SweepError(f"{p}: [sweep].{key}: expected a whole number, got {t[key]!r}")
            setattr(spec, key, t[key])
    if "restart_each" in t:
        if not isinstance(t["restart_each"], bool):
            raise SweepError(f"{p}: [sweep].restart_each: expected true or false, got {t['restart_each']!r}")
        spec.restart_each = t["restart_each"]
    if "urls" in t:
        spec.urls = [_str(p, "urls", u) for u in t["urls"]] if isinstance(t["urls"], list) else [_str(p, "urls", t["urls"])]
    return spec


def _str(p: Path, key: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise SweepError(f"{p}: [sweep].{key}: expected a string, got {v!r}")
    return v


def _value(p: Path, key: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise SweepError(f"{p}: [sweep].{key}: expected a number or a string, got {v!r}")
    return f"{v:g}" if isinstance(v, float) else str(v)
