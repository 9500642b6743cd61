"""From parsed arguments to a checked EngineConfig.

Order is the contract (docs/sim.md#faults-and-what-redline-does, bad input): `checked_config` checks every user value
(options, API key, dataset, preset, --out, --compare) and builds the whole EngineConfig
before anything starts; only then does `running_target` (tui/builtin_sim.py) start the
built-in sim, when there is no URL. A bad value is a one-line UsageError (exit 2) with no
connection and no sim.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (`redline --help`)

from ...engine import api as engine_api  # (`api` is the --api option here)
from ..builtin_sim import BUILTIN_SIM
from .errors import UsageError

if TYPE_CHECKING:
    from ...engine.api import EngineConfig, Preset, WorkloadConfig


def checked_config(args: argparse.Namespace, preset: Preset | None = None) -> EngineConfig:
    """Every user value checked, and the EngineConfig built from them, before any connection
    or sim process. Its url is BUILTIN_SIM when the built-in sim is to be started."""
    check_args(args)
    args.seed = seed_of(args, preset)  # --seed, else the preset's [workload].seed, else 0 (the sim's too)
    urls = target_urls(args)
    url = urls[0] if urls else None
    rate, arrival = None, getattr(args, "arrival", None) or "poisson"
    if preset is None:
        if args.concurrency > args.max_concurrency:
            raise UsageError(f"--concurrency {args.concurrency}: above --max-concurrency {args.max_concurrency}")
        check_shape(args)
        workload = workload_from_args(args)
        concurrency, api, model, live_steps = args.concurrency, args.api, args.model, True
        # open loop: the rate, or in trace mode the speed factor (EngineConfig.rate is both)
        rate = (args.speed or 1.0) if workload.trace is not None else args.rate
    else:
        workload = workload_from_preset(preset, args.seed, request_shaping(args, preset))
        ramp = preset.ramp
        # a rate ramp ([ramp] rate = [...]) or a trace's speeds: the runner sets each step's;
        # the engine starts on the first (duck-typed: older presets have concurrency only)
        rates = tuple(getattr(ramp, "rate", None) or getattr(ramp, "speed", None) or ())
        rate = rates[0] if rates and rates[0] > 0 else None  # a replay's 0: that step held a C
        arrival = getattr(ramp, "arrival", None) or arrival
        concurrency = ramp.concurrency[0] if ramp.concurrency else min(args.concurrency, args.max_concurrency)
        api = args.api or preset.workload.api
        model = args.model or preset.workload.model
        live_steps = False
        top = max(ramp.concurrency, default=0)
        if top > args.max_concurrency:
            raise UsageError(f"--max-concurrency {args.max_concurrency}: preset {preset.name} steps up to C={top}; "
                             "give a --max-concurrency at least that high")
        cap = getattr(ramp, "max_concurrency", None)
        if cap is not None and cap > args.max_concurrency:
            raise UsageError(f"--max-concurrency {args.max_concurrency}: preset {preset.name} allows {cap} requests in flight "
                             "([ramp].max_concurrency); give a --max-concurrency at least that high")
        if not urls and preset.target.url is not None:
            if args.profile is not None:
                raise UsageError(f"--sim-profile {args.profile!r} picks a built-in sim profile; preset {preset.name} has "
                                 f"[target].url {preset.target.url} (give --url to override it)")
            url = preset.target.url
    cfg = engine_config(args, url or BUILTIN_SIM, workload, concurrency=concurrency, api=api, model=model,
                        live_steps=live_steps)
    # a preset run holds its load until the runner opens the first step: every request of
    # the run belongs to a step (none goes out before it)
    cfg.start_paused = cfg.start_paused or preset is not None
    cfg.rate, cfg.arrival = rate, arrival
    cfg.more_urls = tuple(urls[1:])
    cfg.weights = target_weights(args, len(urls))
    cfg.workers, cfg.workers_why = worker_count(args, cfg, preset)
    cfg.workers_auto = (getattr(args, "workers", "auto") or "auto") == "auto"
    cfg.workers_peak = planned_peak(args, cfg, preset) if cfg.workers_auto else 0
    cfg.ray = ray_address(args, cfg)
    cfg.slo, cfg.guard = limits(args, preset)
    cfg.control, cfg.control_token = control(args)
    fixed_size(args, cfg, preset)
    return cfg


def fixed_size(args: argparse.Namespace, cfg: EngineConfig, preset: Preset | None) -> None:
    """--num-requests N, --duration S and --percentiles, checked: a fixed-size run is a plain
    run's (a preset sizes its own steps), held in this process, of single requests."""
    n, d = getattr(args, "num_requests", None), getattr(args, "duration", None)
    if getattr(args, "percentiles", None):
        cfg.percentiles = args.percentiles
    if n is None and d is None:
        return
    flag = "--num-requests" if n is not None else "--duration"
    if preset is not None:
        raise UsageError(f"{flag}: a preset sizes its own steps ([ramp] hold_s, num_requests); give it to a plain run")
    if n is not None and cfg.workload.turns > 1:
        raise UsageError(f"--num-requests {n}: counts requests, and --turns {cfg.workload.turns} sends sessions; give --duration instead")
    if n is not None and cfg.workload.trace is not None:
        raise UsageError(f"--num-requests {n}: a trace replay sends its own rows; give --duration instead")
    if n is not None and (cfg.workers > 1 or cfg.ray is not None):
        raise UsageError(f"--num-requests {n}: counted in one process; give --workers 1 (or --duration)")
    cfg.num_requests, cfg.duration_s = n, d


def control(args: argparse.Namespace) -> tuple:
    """--control [HOST:]PORT and --control-token-env NAME checked before anything starts: a
    non-loopback host without a token, a port that cannot be listened on: one line, exit 2."""
    from ...engine.api import ControlError, check_control

    try:
        return check_control(getattr(args, "control", None), getattr(args, "control_token_env", None), os.environ)
    except ControlError as exc:
        raise UsageError(str(exc)) from None


def worker_count(args: argparse.Namespace, cfg: EngineConfig, preset: Preset | None = None) -> tuple[int, str]:
    """--workers N|auto as EngineConfig.workers, and in words why when auto (the default)
    sized it by this machine's measured token cost (engine/load/worker_count.py: a run that one
    process surely holds measures nothing and says nothing)."""
    n = getattr(args, "workers", "auto") or "auto"
    if n != "auto":
        return int(n), ""
    peak = planned_peak(args, cfg, preset)
    urls = ("http://127.0.0.1" if cfg.url == BUILTIN_SIM else cfg.url, *cfg.more_urls)  # the built-in sim: plain http
    p = engine_api.auto_plan(peak, kernel=engine_api.kernel_stamped(urls, cfg.transport))
    return p.processes, p.why


def planned_peak(args: argparse.Namespace, cfg: EngineConfig, preset: Preset | None = None) -> int:
    """The most requests in flight the run is set to reach, as known at start (what
    `--workers auto` sizes for): closed loop, the -c, a preset's top step or a search's max;
    open loop (a rate, a trace), its in-flight cap when one was given (--max-concurrency or
    [ramp].max_concurrency), else 0: in-flight is the rate times the latency, unknown before
    the run, and the engine warns if one process crowds (engine/load/worker_count.py)."""
    given = getattr(args, "max_concurrency", engine_api.DEFAULT_MAX_CONCURRENCY)
    cap = given if given != engine_api.DEFAULT_MAX_CONCURRENCY else 0
    if preset is None:
        return cap if cfg.rate is not None else cfg.concurrency
    return preset.peak(cap)


def ray_address(args: argparse.Namespace, cfg: EngineConfig) -> str | None:
    """--ray auto|HOST:PORT as EngineConfig.ray (the cluster is joined at start: exit 3 when
    it cannot be)."""
    addr = getattr(args, "ray", None)
    if addr is None:
        return None
    addr = addr.strip()
    if not addr or any(c.isspace() for c in addr):
        raise UsageError(f"--ray {args.ray!r}: expected auto or the Ray head's address, e.g. 10.0.0.1:6379")
    if not ray_installed():
        raise UsageError(f"--ray {addr}: Ray is not installed here; pip install 'redline[ray]' (on every node), or drop --ray")
    return addr


def ray_installed() -> bool:
    """Whether `import ray` can work, asked without importing it (Ray takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def limits(args: argparse.Namespace, preset: Preset | None) -> tuple:
    """(SLO, guard) from --slo / --guard, else the preset's [slo] / [guard]."""
    from ...engine.api import SloError, parse_guard, parse_slo

    try:
        slo = parse_slo(args.slo) if getattr(args, "slo", None) else (preset.slo if preset else None)
        guard = parse_guard(args.guard) if getattr(args, "guard", None) else (preset.guard if preset else None)
    except SloError as exc:  # GuardError is one too
        raise UsageError(str(exc)) from None
    return slo, guard


def target_urls(args: argparse.Namespace) -> list[str]:
    """The --url values in the order given (`--url` is repeatable: the first is
    EngineConfig.url, the others EngineConfig.more_urls); [] without one."""
    urls = getattr(args, "url", None)
    if urls is None:
        return []
    return [urls] if isinstance(urls, str) else list(urls)


def check_urls(urls: list[str]) -> None:
    """Every --url valid (engine/client/target.py validate_url, the one validator) and no target
    twice (compared as normalised: `http://h:1/v1` is `http://h:1`)."""
    seen: dict[str, str] = {}
    for u in urls:
        try:
            base = engine_api.validate_url(u)
        except engine_api.TargetError as exc:
            raise UsageError(str(exc)) from None
        if base in seen:
            same = "" if seen[base] == u else f" (the same target as {seen[base]!r})"
            raise UsageError(f"--url {u!r}: given twice{same}; each --url is one more target, give each server once")
        seen[base] = u


def target_weights(args: argparse.Namespace, n: int) -> tuple[float, ...] | None:
    """--weights as EngineConfig.weights (None: the load split evenly); one line naming the
    value when it does not fit the --url count."""
    text = getattr(args, "weights", None)
    if text is None:
        return None
    if n < 2:
        raise UsageError(f"--weights {text!r}: splits the load over several targets; give --url two or more times, "
                         "one weight per --url")
    from ...engine.api import WeightsError, parse_weights

    try:
        return parse_weights(text, n)
    except WeightsError as exc:
        raise UsageError(str(exc)) from None


def check_args(args: argparse.Namespace) -> None:
    """The options every command that loads a target has, checked before any connection;
    UsageError names the bad one."""
    urls = target_urls(args)
    if urls:
        check_urls(urls)
        if args.profile is not None:
            raise UsageError(f"--sim-profile {args.profile!r} picks a built-in sim profile; it cannot be used with --url")
    target_weights(args, len(urls))
    if args.profile is not None:
        from ...engine.api import get_profile

        try:
            get_profile(args.profile)
        except ValueError as exc:
            raise UsageError(f"--sim-profile: {exc}") from None
    for opt in ("server_metrics", "gpu_metrics"):
        v = getattr(args, opt)
        if v is not None and not v.startswith(("http://", "https://")):
            raise UsageError(f"--{opt.replace('_', '-')} {v!r}: expected an http(s):// URL of Prometheus text")
    api_key(args)
    if args.out is not None:
        check_out_dir(args.out)
    compare = getattr(args, "compare", None)
    if compare is not None:
        try:
            engine_api.check_session_dir(compare)
        except engine_api.SessionError as exc:
            raise UsageError(f"--compare: {exc}") from None


def check_out_dir(out: Path) -> None:
    """--out must be a new (or empty) directory we can create: checked before connecting."""
    try:
        if (out / "meta.json").exists():
            raise UsageError(f"--out {str(out)!r}: already holds a session (meta.json); choose a new directory")
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {str(out)!r}: is a file; expected a directory")
        missing = []
        parent = out
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        if not parent.is_dir():
            raise UsageError(f"--out {str(out)!r}: {str(parent)!r} is a file; expected a directory path")
        # prove it can be created (permissions, read-only or virtual file systems), leave no litter
        for d in reversed(missing):
            d.mkdir()
        for d in missing:
            d.rmdir()
    except OSError as exc:
        raise UsageError(f"--out {str(out)!r}: {exc.strerror or exc}") from None


def api_key(args: argparse.Namespace) -> str | None:
    """The key comes only from the environment; never from argv, never echoed."""
    name = args.api_key_env
    if not name or not name.replace("_", "").isalnum() or name[0].isdigit():
        # never echo the value: an operator may have pasted the key itself here
        raise UsageError("--api-key-env: expected the NAME of an environment variable (like OPENAI_API_KEY), not the key itself")
    key = os.environ.get(name) or None
    if key is not None and not all(32 < ord(ch) < 127 for ch in key):
        raise UsageError(f"API key in ${name}: contains spaces, control or non-ASCII characters; expected a printable token")
    return key


def admin_key(args: argparse.Namespace) -> str | None:
    """SGLang's admin key: --admin-key, else $REDLINE_ADMIN_KEY; never echoed."""
    key = getattr(args, "admin_key", None) or os.environ.get("REDLINE_ADMIN_KEY") or None
    if key is not None and not all(32 < ord(ch) < 127 for ch in key):
        where = "--admin-key" if getattr(args, "admin_key", None) else "$REDLINE_ADMIN_KEY"
        raise UsageError(f"{where}: contains spaces, control or non-ASCII characters; expected a printable token (the admin key SGLang was started with)")
    return key


def check_shape(args: argparse.Namespace) -> None:
    """The load-shape options that only make sense together (each is checked alone by
    argparse): one line naming the option and what is accepted."""
    rate, turns, think, trace, speed = (getattr(args, k, None) for k in ("rate", "turns", "think_s", "trace", "speed"))
    turns = turns or 1
    if trace is not None and rate is not None:
        raise UsageError(f"--rate {rate:g}: a trace replays at its own recorded times; give --speed X with --trace, not --rate")
    if speed is not None and trace is None:
        raise UsageError(f"--speed {speed:g}: the speed factor of a trace replay; give --trace PATH too (for a request rate, --rate R)")
    if turns > 1 and rate is not None:
        raise UsageError(f"--turns {turns}: multi-turn sessions are closed-loop (C counts sessions); not with --rate")
    if turns > 1 and trace is not None:
        raise UsageError(f"--turns {turns}: a trace sets every request itself; not with --trace")
    if think is not None and turns < 2:
        raise UsageError(f"--think-s {think:g}: the pause between turns of a session; give --turns N (2 or more) too")
    if trace is not None:
        from ...engine.api import resolve_trace

        args.trace = resolve_trace(trace)  # `--trace example`: the bundled trace
        check_trace(args.trace)


def check_trace(path: str) -> None:
    """The whole trace read and checked before anything starts (engine/workload/trace.py)."""
    if not path.strip():
        raise UsageError(f"--trace {path!r}: expected the path of a Mooncake JSONL trace")
    try:
        from ...engine.api import TraceError, load_trace
    except ImportError:  # pragma: no cover - the engine without trace replay
        raise UsageError(f"--trace {path!r}: this redline cannot replay traces") from None
    try:
        rows = load_trace(path)
    except TraceError as exc:
        from ...engine.api import builtin_traces

        bundled = ", ".join(builtin_traces())
        hint = f" (or a bundled trace by name: {bundled})" if bundled and not Path(path).expanduser().exists() else ""
        raise UsageError(f"{exc}{hint}") from None
    if not rows:
        raise UsageError(f"--trace {path!r}: no requests in it; expected a Mooncake JSONL trace, one request a line")


def workload_from_args(args: argparse.Namespace) -> WorkloadConfig:
    turns = getattr(args, "turns", None) or 1
    shaping = request_shaping(args)
    given = getattr(args, "output_len", None)  # None: not given (a ShareGPT dataset then asks each reply's length)
    if given is not None and shaping["sharegpt_output_len"] is None and str(args.dataset).startswith("sharegpt:"):
        shaping["sharegpt_output_len"] = given  # --output-len with ShareGPT: every request asks that many, as --sharegpt-output-len
    wl = engine_api.WorkloadConfig(dataset=args.dataset, input_len=args.input_len,
                        output_len=given if given is not None else engine_api.DEFAULT_OUTPUT_LEN, seed=seed_of(args),
                        turns=turns, think_s=getattr(args, "think_s", None) or 0.0, trace=getattr(args, "trace", None),
                        **shaping)
    check_workload(wl)
    return wl


def workload_from_preset(preset: Preset, seed: int = 0, shaping: dict | None = None) -> WorkloadConfig:
    w = preset.workload
    wl = engine_api.WorkloadConfig(dataset=w.dataset, input_len=w.input_len, output_len=w.output_len, seed=seed,
                        turns=getattr(w, "turns", 1), think_s=getattr(w, "think_s", 0.0), trace=getattr(w, "trace", None),
                        **(shaping or {}))
    check_workload(wl)
    return wl


def seed_of(args: argparse.Namespace, preset: Preset | None = None) -> int:
    """The workload's seed: --seed, else the preset's [workload].seed, else 0."""
    seed = getattr(args, "seed", None)
    if seed is None and preset is not None:
        seed = getattr(preset.workload, "seed", None)
    return seed if seed is not None else 0


def request_shaping(args: argparse.Namespace, preset: Preset | None = None) -> dict:
    """The WorkloadConfig's request shaping (docs/load-shapes.md#request-shaping): -H,
    --extra-body, --no-ignore-eos and --random-range-ratio over the preset's [workload] keys
    (a header by its name, the extra body key by key). Each flag was checked as it was parsed;
    here what only the whole says: a header given twice, a range ratio beside a dataset whose
    lengths are its own. One line naming the flag."""
    import json

    w = preset.workload if preset is not None else None
    try:
        given = engine_api.check_headers(tuple(getattr(args, "headers", None) or ()), "--header")
    except engine_api.RequestShapeError as exc:
        raise UsageError(str(exc)) from None
    headers = {n.lower(): (n, v) for n, v in getattr(w, "headers", ())}
    headers.update((n.lower(), (n, v)) for n, v in given)
    extra = {**json.loads(getattr(w, "extra_body", "") or "{}"), **json.loads(getattr(args, "extra_body", None) or "{}")}
    ignore_eos = getattr(args, "ignore_eos", None)
    ratio = getattr(args, "random_range_ratio", None)
    ratio = ratio if ratio is not None else getattr(w, "random_range_ratio", 0.0)
    dataset, trace = (w.dataset, getattr(w, "trace", None)) if w is not None else (getattr(args, "dataset", "random"), getattr(args, "trace", None))
    if ratio and (trace is not None or dataset != "random"):
        raise UsageError(f"--random-range-ratio {ratio:g}: spreads the random dataset's input and output lengths; "
                         f"not with {'a trace' if trace is not None else f'dataset {dataset!r}'} (its lengths are its own)")
    fixed, context = getattr(args, "sharegpt_output_len", None), getattr(args, "sharegpt_context_len", None)
    for flag, v in (("--sharegpt-output-len", fixed), ("--sharegpt-context-len", context)):
        if v is not None and (trace is not None or not str(dataset).startswith("sharegpt:")):
            raise UsageError(f"{flag} {v}: for a ShareGPT dataset (--dataset sharegpt:FILE); "
                             f"not with {'a trace' if trace is not None else f'dataset {dataset!r}'}")
    return {
        "headers": tuple(headers.values()),
        "extra_body": engine_api.extra_body_text(extra),
        "ignore_eos": ignore_eos if ignore_eos is not None else getattr(w, "ignore_eos", True),
        "random_range_ratio": ratio,
        "sharegpt_output_len": fixed,
        "sharegpt_context_len": context,
    }


def check_workload(wl: WorkloadConfig) -> None:
    if wl.dataset != "random":
        try:
            engine_api.load_dataset(wl.dataset, wl.output_len, config=wl)
        except engine_api.WorkloadError as exc:
            raise UsageError(str(exc)) from None


def engine_config(
    args: argparse.Namespace,
    url: str,
    workload: WorkloadConfig,
    *,
    concurrency: int,
    api: str | None,
    model: str | None,
    live_steps: bool,
) -> EngineConfig:
    """The EngineConfig of checked arguments (benchmarks/lag.py builds one the same way)."""
    out: Path = args.out or engine_api.default_session_dir()
    return engine_api.EngineConfig(
        url=url,
        api=api,
        model=model,
        workload=workload,
        concurrency=concurrency,
        max_concurrency=args.max_concurrency,
        request_timeout=args.request_timeout,
        api_key=api_key(args),
        insecure=args.insecure,
        transport=args.transport,
        out_dir=out,
        label=args.label,
        server_metrics_url=args.server_metrics,
        gpu_metrics_url=args.gpu_metrics,
        use_nvml=not args.no_nvml,
        live_steps=live_steps,
        command_line=engine_api.redact_argv(args.argv),
        seed=seed_of(args),
        profile_s=getattr(args, "profile_s", 5.0),
        flush_cache=getattr(args, "flush_cache", False),
        admin_key=admin_key(args),
    )
