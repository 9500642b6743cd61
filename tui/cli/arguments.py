"""The command line: parse, then hand the arguments to one handler (tui/cli/handlers.py).

    redline [OPTIONS]                    the TUI (on the built-in sim when there is no --url)
    redline COMMAND [ARGS]               run, presets, export, report, preset-from, sim

Each command is an argparse subcommand whose `handler` default is its function; plain
`redline` (no command) is the TUI. Options go after the command: `redline --no-nvml sim`
is refused (one line, exit 2), as is an unknown command. Arguments are checked before any
connection and before the built-in sim starts. Bad input: one line on stderr naming the
value and what is accepted, exit 2. Target unreachable at the start: exit 3. No traceback.
Textual is imported only when the TUI opens, so `--help` and headless runs stay fast; each
command's own arguments are added when that command is parsed or its help printed (issue 26:
`redline --help` builds and prints the top level only).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~4 ms of `redline --help`)
if TYPE_CHECKING:
    from typing import Any, Callable, NoReturn, Sequence

from ...engine import api
from ...engine.api import (
    DEFAULT_CONCURRENCY,
    DEFAULT_INPUT_LEN,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_STEP,
    DEFAULT_TRANSPORT,
    MAX_SEED,
    TRANSPORTS,
    __version__,
)
from ..exits import EXIT_BAD_INPUT, EXIT_OK
from . import handlers as commands, refusals, sweep_cmd as sweeps
from .errors import UsageError


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size() reads it ($COLUMNS, else stdout's
    terminal, else 80), without importing shutil (and with it zlib, bz2 and lzma)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:  # (None: no stdout at all, as pythonw)
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, its width read without shutil (_columns); a command that may be left out
    shows so in the usage line: `[COMMAND ...]` (plain `redline` is the TUI)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        text = super()._format_args(action, default_metavar)
        return f"[{text}]" if action.nargs == argparse.PARSER and not action.required else text


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage dump) and exits 2.

    `add_arguments(parser)`, when given, adds the arguments the first time this parser
    parses or prints help: `redline sim` takes its options from engine/sim/serve.py, whose
    aiohttp import would otherwise double the start-up of `redline --help` and every command;
    the other commands' options are added the same way, so `redline --help` builds only what
    it prints.
    """

    # Any: argparse.ArgumentParser's own arguments, passed on
    def __init__(self, *args: Any, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
                 hints: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--headles` is a typo, not --headless (docs/cli.md)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._add_arguments = add_arguments
        self.hints = hints  # its options are named in another parser's unknown-option error ("an option of ...")
        self._argv: list[str] = []

    def _complete(self) -> None:
        if self._add_arguments is not None:
            add, self._add_arguments = self._add_arguments, None
            add(self)

    def parse_known_args(self, args=None, namespace=None):
        self._complete()
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._complete()
        return super().format_help()

    def format_usage(self) -> str:
        self._complete()
        return super().format_usage()

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:  # Any: argparse's (what the type gives)
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:  # the option named once: `--concurrency '0': expected ...`
            raise argparse.ArgumentError(None, refusals.type_refusal(action, arg_string, exc.message)) from None

    def _check_value(self, action: argparse.Action, value: object) -> None:
        if action.choices is not None and value not in action.choices:  # `unknown command 'reprot'; did you mean report?`
            raise argparse.ArgumentError(None, refusals.choice_refusal(action, value))
        super()._check_value(action, value)

    def error(self, message: str) -> NoReturn:
        prog = self.prog
        unknown = self._unknown_option()
        if unknown is not None:  # named, not `invalid choice: '32'` for `--concurency 32`
            prog, message = unknown
        self.exit(EXIT_BAD_INPUT, f"{prog}: error: {message} (see {prog} --help)\n")

    def _unknown_option(self) -> tuple[str, str] | None:
        """(prog, message) for the first option in the arguments that no parser knows, with the
        closest real one; None when every option is known."""
        subs: dict[str, argparse.ArgumentParser] = {}
        for a in self._actions:
            if isinstance(a, argparse._SubParsersAction):
                subs = dict(a.choices)
        for p in subs.values():  # the commands whose options an error names ("it is an option of ...")
            if isinstance(p, OneLineParser) and p.hints:
                p._complete()
        parser: argparse.ArgumentParser = self
        for tok in self._argv:
            if tok == "--":
                return None
            if parser is self and tok in subs:
                parser = subs[tok]
                if isinstance(parser, OneLineParser):
                    parser._complete()
                continue
            if not tok.startswith("-") or tok == "-" or _is_number(tok):
                continue
            name = tok.split("=", 1)[0]
            known = parser._option_string_actions
            if name in known or (not tok.startswith("--") and tok[:2] in known):  # -c32
                continue
            others = [p for p in (self, *subs.values()) if p is not parser]
            return parser.prog, f"unknown option {name!r}{_option_hint(name, parser, others)}"
        return None


def _option_hint(name: str, parser: argparse.ArgumentParser, others: Sequence[argparse.ArgumentParser]) -> str:
    """The tail of an unknown option's refusal, best first: another tool's name for one of
    ours (bench_serving's --qps, --output-file; tui/cli/refusals.py KNOWN_ELSEWHERE), the option
    of another command, the start of exactly one option, the nearest spelling here, or the
    nearest spelling of another command's option when that one is nearer."""
    import difflib

    known = parser._option_string_actions
    alias = refusals.known_elsewhere(name, parser.prog, [o for o in known if o.startswith("--")])
    if alias:
        return alias
    elsewhere = [p.prog for p in others if name in p._option_string_actions]
    if elsewhere:
        return f"; it is an option of {elsewhere[0]}, not of {parser.prog}"
    longs = [o for o in known if o.startswith("--")]
    word = name if name.startswith("--") else "-" + name
    close = [o for o in longs if o.startswith(name)] if name.startswith("--") else []
    if len(close) == 1:  # `--conc` is the start of --concurrency alone: that one, not --control
        return f"; did you mean {close[0]}?"

    def best(options: Sequence[str]) -> tuple[float, str]:
        near = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
        return (difflib.SequenceMatcher(None, word, near[0]).ratio(), near[0]) if near else (0.0, "")

    here = best(longs)
    there = max(((*best([o for o in p._option_string_actions if o.startswith("--")]), p.prog) for p in others),
                default=(0.0, "", ""))
    if there[0] > here[0] + 0.05:  # `redline run quick --concurency 8`: redline's --concurrency, not run's --max-concurrency
        return f"; did you mean {there[1]}? it is an option of {there[2]}, not of {parser.prog}"
    return f"; did you mean {here[1]}?" if here[1] else ""


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _sim_arguments(parser: argparse.ArgumentParser) -> None:
    """The sim's own options, exactly as `python -m redline.engine.sim` takes them."""
    api.add_sim_arguments(parser)


def _positive_int(name: str) -> Callable[[str], int]:
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {s!r}: expected a whole number >= 1") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} {s!r}: expected a whole number >= 1")
        return v

    return parse


def _positive_float(name: str) -> Callable[[str], float]:
    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {s!r}: expected a number of seconds > 0") from None
        if not v > 0 or v != v or v == float("inf"):
            raise argparse.ArgumentTypeError(f"{name} {s!r}: expected a number of seconds > 0")
        return v

    return parse


def _rate(name: str, lo: float | None = None) -> Callable[[str], float]:
    """A request rate: a finite number, at least 0.1 req/s (engine/workload/arrivals.py MIN_RATE;
    `lo` = 0: any number > 0, for a step)."""

    def parse(s: str) -> float:
        try:
            return api.check_rate(s, name, lo=lo)
        except api.ArrivalError as exc:
            if lo is None and s.strip().lower() in ("inf", "+inf", "infinity"):  # bench_serving's default: all at once
                raise argparse.ArgumentTypeError(f"{name} {s!r}: {refusals.ALL_AT_ONCE}") from None
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _speed(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not (0 < v <= 1000):  # nan fails too
        raise argparse.ArgumentTypeError(f"--speed {s!r}: expected a speed factor, a number > 0 and at most 1000 (2 = twice as fast as recorded)")
    return v


def _duration(name: str) -> Callable[[str], float]:
    def parse(s: str) -> float:
        t = s.strip().lower()
        mult = 60.0 if t.endswith("m") and not t.endswith("ms") else 1.0
        t = t[:-1] if t.endswith(("s", "m")) and not t.endswith("ms") else t
        try:
            v = float(t) * mult
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"{name} {s!r}: expected seconds > 0, such as 20, 30s or 5m")
        return v

    return parse


def _percentiles(s: str) -> tuple[float, ...]:
    out = []
    for part in [p.strip() for p in s.split(",") if p.strip()]:
        try:
            v = float(part.lstrip("pP"))
        except ValueError:
            v = math.nan
        if not 0 < v < 100:
            raise argparse.ArgumentTypeError(f"--percentiles {s!r}: expected percentiles between 0 and 100 separated by commas, such as 50,90,95,99")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError(f"--percentiles {s!r}: expected at least one, such as 50,90,95,99")
    return tuple(sorted(set(out)))


def _arrival(s: str) -> str:
    try:
        return api.parse_arrival(s).describe()
    except api.ArrivalError as exc:
        raise argparse.ArgumentTypeError(f"--{exc}") from None


def _think_s(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not (0 <= v <= 3600):
        raise argparse.ArgumentTypeError(f"--think-s {s!r}: expected seconds between turns, a number from 0 to 3600")
    return v


def _workers(s: str) -> int | str:
    if s.strip() == "auto":
        return "auto"
    try:
        v = int(s)
    except ValueError:
        v = 0
    if not 1 <= v <= 256:
        raise argparse.ArgumentTypeError(f"--workers {s!r}: expected a whole number from 1 to 256, or auto")
    return v


def _shaping(check: Callable[[str, str], object], flag: str) -> Callable[[str], object]:
    """An argparse type of a request-shaping check (engine/workload/request_shape.py, the one
    the preset's [workload] keys use too): its one-line refusal is argparse's."""

    def parse(s: str) -> object:
        try:
            return check(s, flag)
        except api.RequestShapeError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


_header = _shaping(lambda s, flag: api.parse_header(s, flag), "--header")
_extra_body = _shaping(lambda s, flag: api.extra_body_text(api.parse_extra_body(s, flag)), "--extra-body")
_range_ratio = _shaping(lambda s, flag: api.check_range_ratio(s, flag), "--random-range-ratio")


def _seed(s: str) -> int:
    """--seed: the bounds of [workload].seed (engine/constants.py MAX_SEED: 2**63-1)."""
    try:
        v = int(s)
    except ValueError:
        v = -1
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"--seed {s!r}: expected a whole number from 0 to 2**63-1")
    return v


def _target_options(p: argparse.ArgumentParser, *, url_help: str) -> None:
    g = p.add_argument_group("target")
    g.add_argument("--url", "--base-url", action="append", default=None, metavar="URL", help=url_help)
    g.add_argument("--workers", type=_workers, default="auto", metavar="N|auto", help="hold the load in N worker processes, each its share of C and its own connections (default auto: as many as this machine's measured token cost says keep each one's reads within a share of the token interval, up to the cores free; this engine process where one suffices; more added while the run grows)")
    g.add_argument("--ray", default=None, metavar="auto|ADDRESS", help="place the --workers as Ray actors on this Ray cluster (auto: the one this host is in; ADDRESS: its head, host:6379), spread over its nodes; needs redline[ray] on every node")
    g.add_argument("--weights", default=None, metavar="W1,W2,...", help="with --url given several times: split the load by these weights, one positive number per --url in order (default: evenly)")
    g.add_argument("--sim-profile", dest="profile", default=None, metavar="NAME", help="built-in sim profile when no --url (healthy, pp-capped, fragile, flaky)")
    refusals.add_renamed_profile(g)  # the old --profile: one line naming --sim-profile
    g.add_argument("--api", choices=("chat", "completions", "generate"), default=None, help="API to load (default: chat when /v1/models answers, else SGLang /generate)")
    g.add_argument("--model", default=None, help="model name to send (default: the first of /v1/models)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME", help="environment variable holding the API key, sent as a bearer token (default OPENAI_API_KEY); never shown or logged")
    g.add_argument("--insecure", action="store_true", help="do not verify TLS certificates (warned on screen and in the log)")
    g.add_argument("--request-timeout", type=_positive_float("--request-timeout"), default=DEFAULT_REQUEST_TIMEOUT_S, metavar="S", help=f"a stream silent this long fails as a timeout (default {DEFAULT_REQUEST_TIMEOUT_S:.0f})")
    g.add_argument("--max-concurrency", type=_positive_int("--max-concurrency"), default=DEFAULT_MAX_CONCURRENCY, metavar="N", help=f"highest concurrency accepted; in rate mode the cap on requests in flight (sends beyond it wait, counted) (default {DEFAULT_MAX_CONCURRENCY})")
    g.add_argument("--server-metrics", default=None, metavar="URL", help="server /metrics (default: the target's /metrics)")
    g.add_argument("--gpu-metrics", default=None, metavar="URL", help="dcgm-exporter metrics, e.g. http://host:9400/metrics (default: local NVML)")
    g.add_argument("--no-nvml", action="store_true", help="do not read local GPUs through NVML")
    g.add_argument("--transport", choices=TRANSPORTS, default=DEFAULT_TRANSPORT, help=argparse.SUPPRESS)
    lim = p.add_argument_group("limits")
    lim.add_argument("--slo", default=None, metavar="SPEC", help="SLOs: per request ttft=2s,tpot=50ms,itl=100ms,e2e=60s; per step ttft_p99=,itl_p99=,e2e_p99=; attainment=0.9 (goodput counts the requests meeting them; a preset ramp stops when a step misses them)")
    lim.add_argument("--guard", default=None, metavar="SPEC", help="guard rails: errors=5%%,ttft_p99=10s,gpu_temp=85; crossed for 5 s, the load drops to the last good C by itself")
    ins = p.add_argument_group("inside the server", "the server's profiler and prefix cache at the load held (docs/inside-the-server.md)")
    ins.add_argument("--profile-s", type=_positive_float("--profile-s"), default=5.0, metavar="S", help="a profiler capture (key P, [ramp] profile) stops after S seconds or at its step's end (default 5)")
    ins.add_argument("--flush-cache", action="store_true", help="before each preset step and the probe: drain the load to zero, then flush the server's prefix cache (SGLang /flush_cache, vLLM /reset_prefix_cache)")
    ins.add_argument("--admin-key", default=None, metavar="KEY", help="SGLang's --admin-api-key, sent as the bearer of /flush_cache and the profiler (default: $REDLINE_ADMIN_KEY; prefer the variable, a command line is visible to other users); never shown, logged or written")
    o = p.add_argument_group("session")
    o.add_argument("--out", type=Path, default=None, metavar="DIR", help="session directory (default ./redline-sessions/<UTC time>)")
    o.add_argument("--label", default=None, help="session label for comparisons (default: model and tp/pp sizes)")
    o.add_argument("--percentiles", "--metric-percentiles", type=_percentiles, default=None, metavar="P,...", help="the percentiles summary.json, the report, exports and the end summary carry for TTFT, ITL, TPOT and E2E (default 50,90,95,99)")
    o.add_argument("--progress-s", type=_positive_float("--progress-s"), default=None, metavar="S", help="headless without a terminal: a progress line every S seconds (default 10; on a terminal one live line)")
    o.add_argument("--seed", type=_seed, default=None, metavar="N", help="the workload's randomness: prompts, random lengths, arrivals, the built-in sim (default: the preset's [workload].seed, else 0)")
    _request_options(p)


def _request_options(p: argparse.ArgumentParser) -> None:
    """Request shaping (docs/load-shapes.md#request-shaping): what every request carries beside
    its prompt, as vllm bench serve and SGLang's bench_serving shape theirs. Each wins over the
    preset's [workload] key of the same name."""
    g = p.add_argument_group("request shaping", "what every request carries beside its prompt (docs/load-shapes.md#request-shaping); each wins over the preset's [workload] key")
    g.add_argument("-H", "--header", action="append", type=_header, default=None, dest="headers", metavar="'NAME: VALUE'", help="a header sent on every request of the load and the probe lane (repeated); a credential's value (Authorization, X-Api-Key, Cookie, names with token, secret, key, auth, password) is never shown or logged")
    g.add_argument("--extra-body", type=_extra_body, default=None, metavar="JSON", help='a JSON object merged into every request body, e.g. \'{"temperature": 0.5, "top_p": 0.9}\' (not the keys redline writes: messages, prompt, model, max_tokens, stream, ...; /generate: its sampling_params merge into redline\'s)')
    g.add_argument("--no-ignore-eos", "--disable-ignore-eos", action="store_const", const=False, default=None, dest="ignore_eos", help="do not ask the server to ignore EOS: outputs end where the model stops (their lengths from the server's usage), at most max_tokens")
    g.add_argument("--random-range-ratio", type=_range_ratio, default=None, metavar="R", help="0 <= R < 1: each random prompt's input and output lengths drawn from [L*(1-R), L*(1+R)] (vllm bench serve's definition; default 0: fixed lengths)")
    g.add_argument("--sharegpt-output-len", type=_positive_int("--sharegpt-output-len"), default=None, metavar="N", help="a ShareGPT dataset: ask every prompt for N tokens (default: the length of the conversation's own reply, as bench_serving)")
    g.add_argument("--sharegpt-context-len", type=_positive_int("--sharegpt-context-len"), default=None, metavar="N", help="a ShareGPT dataset: leave out the conversations whose prompt and reply together pass N tokens (bench_serving's; default: none left out for length)")


def _result_options(p: argparse.ArgumentParser) -> None:
    """bench_serving's and `vllm bench serve`'s result file: the run's summary.json (always
    written in the session directory) copied to a file of the operator's choosing at the end."""
    g = p.add_argument_group("result file", "bench_serving's names for the summary redline always writes (SESSION/summary.json)")
    g.add_argument("--result-filename", type=Path, default=None, metavar="FILE", help="at the end, also write the summary (summary.json: the whole run, every step) to FILE")
    g.add_argument("--save-result", action="store_true", help="accepted for bench_serving's habit: the summary is always saved (SESSION/summary.json); the end names the file")


def _control_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("control API", "steer the run from scripts: HTTP/JSON under /v1/, Prometheus /metrics (docs/steering.md)")
    g.add_argument("--control", default=None, metavar="[HOST:]PORT", help="serve the control API on PORT (host 127.0.0.1 unless given; any other host needs --control-token-env)")
    g.add_argument("--control-token-env", default=None, metavar="NAME", help="environment variable holding the control API's bearer token (every request then needs Authorization: Bearer TOKEN); never shown or logged")


def _run_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("preset", metavar="NAME|FILE", help="a built-in preset's name (redline presets lists them) or a preset TOML file")
    r.add_argument("--headless", action="store_true", help="no TUI: print a line per step and a final table")
    r.add_argument("--search", action="store_true", help="an adaptive knee search from the preset's first concurrency up to --max-concurrency, instead of its steps")
    r.add_argument("--gate", default=None, metavar="SPEC", help="with --headless: CI conditions checked at the end, e.g. knee>=64,tok_s@C=64>=2500,ttft_p99@C=64<=2s,errors<=1%% (replaces the preset's [gate]); a failed one exits 4")
    r.add_argument("--junit", type=Path, default=None, metavar="FILE", help="with a gate: also write its conditions as a JUnit XML report")
    _repeat_options(r.add_argument_group("repeats"))
    _target_options(r, url_help="server base URL, repeatable for more targets (overrides the preset's [target].url; default: the built-in sim)")
    _result_options(r)
    _control_options(r)


def _repeat_options(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """--repeats and --gpus: `redline sweep` and `redline run` (docs/comparing.md#repeats-and-intervals)."""
    g.add_argument("--repeats", type=_positive_int("--repeats"), default=None, metavar="N", help="run the preset N times (each configuration's): per load a mean, a 95 %% interval and the CV; comparisons say better, worse or no clear difference (default: the preset's [ramp] repeats, else 1)")
    g.add_argument("--gpus", type=_positive_int("--gpus"), default=None, metavar="N", help="GPUs the server uses, for tok/s per GPU, when its /server_info says no tp x pp (vLLM, ...)")


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", type=Path, default=None, metavar="FILE.toml",
                   help="a TOML file with a [sweep] table (serve, configs or grid, preset, ready_timeout_s, cooldown_s); flags override it")
    g = p.add_argument_group("sweep")
    g.add_argument("--serve", default=None, metavar="CMD", help="the server's command line: {port} a free port redline picks, {NAME} a --grid value")
    g.add_argument("--grid", action="append", default=[], metavar="NAME=V,...",
                   help="one configuration: tp=8,pp=1 (repeated: one each); mb=8|16|64 one per value, several such keys their product")
    g.add_argument("--preset", default=None, metavar="NAME|FILE", help=f"the preset each configuration runs (default {sweeps.DEFAULT_PRESET})")
    g.add_argument("--port", type=int, default=None, metavar="N", help="the port every configuration's server listens on (instead of a free one in {port})")
    g.add_argument("--url-template", default=None, metavar="URL", help="each server's URL, e.g. http://gpu-host:{port} (default http://127.0.0.1:{port})")
    g.add_argument("--ready-timeout", type=float, default=None, metavar="S", help="wait this long for a server to answer /health and /v1/models (default 900)")
    g.add_argument("--cooldown", type=float, default=None, metavar="S", help="pause between configurations (default 0)")
    _repeat_options(g)
    g.add_argument("--restart-each", action="store_true", help="with --repeats: relaunch each configuration's server before each repeat (default: kept up between them)")
    g.add_argument("--resume", action="store_true", help="go on with the stopped sweep in --out: its completed configurations kept, the others run again (a differing grid or preset is refused)")
    g.add_argument("--dry-run", action="store_true", help="print each configuration's label, command and URL, start nothing")
    g.add_argument("--headless", action="store_true", help="no TUI: print each configuration's progress, its step lines and one comparison")
    g.add_argument("--gate", default=None, metavar="SPEC", help="conditions on every configuration (knee>=64, errors<=1%%), or best:LABEL (that configuration gives the most tok/s); a failed one exits 4")
    _target_options(p, url_help="a server already running (repeated): the preset against each in turn, instead of --serve")


def _export_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("session_dir", type=Path)
    e.add_argument("--format", "-f", required=True, choices=("parquet", "csv", "ndjson", "json"),
                   help="parquet, csv or ndjson: a file per table (requests, timeline, events, steps); json: one document, session.json (meta, summary and every table)")
    e.add_argument("-o", "--output", type=Path, default=None, metavar="PATH", help="output directory (default SESSION_DIR/export)")


def _report_arguments(rp: argparse.ArgumentParser) -> None:
    rp.add_argument("session_dirs", type=Path, nargs="+", metavar="SESSION_DIR")
    rp.add_argument("--png", type=Path, default=None, metavar="FILE", help="also write the saturation curves as a PNG (needs the png extra)")
    rp.add_argument("--no-plot", action="store_true", help="tables only, no terminal curves")
    rp.add_argument("--html", type=Path, default=None, metavar="FILE", help="also write one self-contained interactive HTML page (needs the html extra)")
    rp.add_argument("--gate", default=None, metavar="SPEC", help="CI conditions: with BASELINE CANDIDATE, changes such as tok_s>=-5%%,ttft_p99<=+10%%,knee>=-1step; absolute ones (knee>=64) on the last session; a failed one exits 4")
    rp.add_argument("--junit", type=Path, default=None, metavar="FILE", help="with --gate: also write its conditions as a JUnit XML report")


def _preset_from_arguments(pf: argparse.ArgumentParser) -> None:
    pf.add_argument("session_dir", type=Path)
    pf.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.toml")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="redline",
        description="Live load controller for LLM inference servers. With no --url, opens on the built-in simulated server. "
                    "Options of a command go after it: redline COMMAND --help.",
    )
    p.add_argument("--version", action="version", version=f"redline {__version__}")
    _target_options(p, url_help="server base URL, e.g. http://127.0.0.1:30000; give it again for more targets (replicas, one per node), the load split over them (default: start the built-in sim)")
    w = p.add_argument_group("load")
    w.add_argument("--concurrency", "-c", type=_positive_int("--concurrency"), default=DEFAULT_CONCURRENCY, metavar="N", help=f"starting concurrency (default {DEFAULT_CONCURRENCY})")
    w.add_argument("--step", type=_positive_int("--step"), default=DEFAULT_STEP, metavar="N", help=f"+/- change (default {DEFAULT_STEP})")
    w.add_argument("--input-len", "--random-input-len", type=_positive_int("--input-len"), default=DEFAULT_INPUT_LEN, metavar="N", help=f"random prompt length in server tokens (default {DEFAULT_INPUT_LEN})")
    # default None: a ShareGPT dataset asks each reply's own length unless --output-len is given (launch.py)
    w.add_argument("--output-len", "--random-output-len", type=_positive_int("--output-len"), default=None, metavar="N", help=f"max_tokens, with ignore_eos (default {DEFAULT_OUTPUT_LEN}; a ShareGPT dataset: each conversation's reply length unless given)")
    w.add_argument("--dataset", default="random", help="random | sharegpt:PATH | jsonl:PATH | prefix:groups=G,prefix_len=P,suffix_len=S (G groups of prompts sharing a P-token prefix)")
    shape = p.add_argument_group("load shape", "open-loop request rate, multi-turn chat, trace replay (key m switches concurrency <-> rate)")
    shape.add_argument("--rate", "--request-rate", type=_rate("--rate"), default=None, metavar="R", help="start in open-loop rate mode at R requests/s (latencies from each intended send time; --max-concurrency caps what is in flight)")
    # default None, read as poisson (launch.py): a string default would be parsed, and its module imported, on every start
    shape.add_argument("--arrival", type=_arrival, default=None, metavar="KIND", help="rate mode's arrivals: poisson (default), constant or gamma:K (K < 1 burstier, K > 1 smoother)")
    shape.add_argument("--rate-step", type=_rate("--rate-step", lo=0.0), default=1.0, metavar="R", help="what +/- add and remove in rate mode, in req/s (default 1)")
    shape.add_argument("--turns", type=_positive_int("--turns"), default=1, metavar="N", help="multi-turn chat: sessions of N turns, each sending the conversation so far; C counts sessions (not with --rate or --trace)")
    shape.add_argument("--think-s", type=_think_s, default=None, metavar="S", help="multi-turn: seconds between an answer and the next turn (default 0; needs --turns 2 or more)")
    shape.add_argument("--trace", default=None, metavar="PATH|NAME", help="replay a Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids) open-loop at its recorded times; a file, or a bundled trace by name (example)")
    shape.add_argument("--speed", type=_speed, default=None, metavar="X", help="with --trace: replay X times as fast as recorded (default 1)")
    w.add_argument("--compare", type=Path, default=None, metavar="SESSION_DIR", help="overlay an earlier session on the saturation curve (key g)")
    fixed = p.add_argument_group("fixed-size run", "stop the load by itself, close the session as q does; headless: a summary in bench_serving's layout")
    fixed.add_argument("--num-requests", "-n", "--num-prompts", type=_positive_int("--num-requests"), default=None, metavar="N", help="stop after N requests were sent and ended")
    fixed.add_argument("--duration", type=_duration("--duration"), default=None, metavar="S", help="stop after S seconds (20, 30s, 5m)")
    p.add_argument("--headless", action="store_true", help="no TUI: hold the starting load until the control API (--control) changes or stops it, or a signal ends it")
    _result_options(p)
    _control_options(p)
    p.set_defaults(handler=commands.cmd_tui)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    r = sub.add_parser("run", help="run a preset, by name or file (TUI, or --headless)", add_arguments=_run_arguments, hints=True)
    r.set_defaults(handler=commands.cmd_run)

    from .ctl import add_ctl_parser

    add_ctl_parser(sub, formatter_class=HelpFormatter)

    sw = sub.add_parser("sweep", help="run a preset against each server configuration of a grid, launching and stopping each server, and compare them",
                        add_arguments=_sweep_arguments, hints=True)
    sw.set_defaults(handler=sweeps.cmd_sweep)

    ps = sub.add_parser("presets", help="list the built-in presets with their descriptions")
    ps.set_defaults(handler=commands.cmd_presets)

    e = sub.add_parser("export", help="export a session's tables with polars", add_arguments=_export_arguments, hints=True)
    e.set_defaults(handler=commands.cmd_export)

    rp = sub.add_parser("report", help="step tables, break results and saturation curves of one or more sessions",
                        add_arguments=_report_arguments, hints=True)
    rp.set_defaults(handler=commands.cmd_report)

    pf = sub.add_parser("preset-from", help="write a preset that replays a session's concurrency timeline",
                        add_arguments=_preset_from_arguments, hints=True)
    pf.set_defaults(handler=commands.cmd_preset_from)

    s = sub.add_parser(
        "sim", help="serve the simulated SGLang/OpenAI server",
        description="Simulated SGLang/OpenAI inference server with a continuous-batching performance model, "
                    "simulated GPUs and fault profiles.",
        add_arguments=_sim_arguments,
    )
    s.set_defaults(handler=commands.cmd_sim)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)  # a parse error: one line, exit 2 (OneLineParser)
    if args.command is not None and argv[0] != args.command:
        # `redline --no-nvml sim`: the TUI's options do not apply to a command
        print(f"redline: error: {argv[0]!r} comes before the command {args.command!r}; a command's options go after it "
              f"(see redline {args.command} --help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.argv = ["redline", *argv]
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"redline: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `redline presets | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
