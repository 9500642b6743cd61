"""From parsed arguments to a checked EngineConfig, then to a running target.

Order is the contract (README, "Faults", bad input): `checked_config` checks every user value
(options, API key, dataset, preset, --out, --compare) and builds the whole EngineConfig
before anything starts; only then does `running_target` start the built-in sim, when there
is no URL. A bad value is a one-line UsageError (exit 2) with no connection and no sim.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Iterator

from redline.engine.config import EngineConfig
from redline.engine.preset import Preset
from redline.engine.session import SessionError, check_session_dir, default_session_dir
from redline.engine.session.scrub import redact_argv
from redline.engine.target import TargetError, validate_url
from redline.engine.workload import WorkloadConfig, WorkloadError, load_dataset

from .errors import UsageError

DEFAULT_PROFILE = "healthy"
BUILTIN_SIM = ""  # EngineConfig.url before running_target has started the built-in sim


def checked_config(args: argparse.Namespace, preset: Preset | None = None) -> EngineConfig:
    """Every user value checked, and the EngineConfig built from them, before any connection
    or sim process. Its url is BUILTIN_SIM when the built-in sim is to be started."""
    check_args(args)
    url = args.url
    if preset is None:
        if args.concurrency > args.max_concurrency:
            raise UsageError(f"--concurrency {args.concurrency}: above --max-concurrency {args.max_concurrency}")
        workload = workload_from_args(args)
        concurrency, api, model, live_steps = args.concurrency, args.api, args.model, True
    else:
        workload = workload_from_preset(preset, args.seed)
        concurrency = preset.ramp.concurrency[0]
        api = args.api or preset.workload.api
        model = args.model or preset.workload.model
        live_steps = False
        top = max(preset.ramp.concurrency)
        if top > args.max_concurrency:
            raise UsageError(f"--max-concurrency {args.max_concurrency}: preset {preset.name} steps up to C={top}; "
                             "give a --max-concurrency at least that high")
        if url is None and preset.target.url is not None:
            if args.profile is not None:
                raise UsageError(f"--profile {args.profile!r} picks a built-in sim profile; preset {preset.name} has "
                                 f"[target].url {preset.target.url} (give --url to override it)")
            url = preset.target.url
    cfg = engine_config(args, url or BUILTIN_SIM, workload, concurrency=concurrency, api=api, model=model,
                        live_steps=live_steps)
    cfg.slo, cfg.guard = limits(args, preset)
    return cfg


def limits(args: argparse.Namespace, preset: Preset | None) -> tuple:
    """(SLO, guard) from --slo / --guard, else the preset's [slo] / [guard]."""
    from redline.engine.guard import parse_guard
    from redline.engine.slo import SloError, parse_slo

    try:
        slo = parse_slo(args.slo) if getattr(args, "slo", None) else (preset.slo if preset else None)
        guard = parse_guard(args.guard) if getattr(args, "guard", None) else (preset.guard if preset else None)
    except SloError as exc:  # GuardError is one too
        raise UsageError(str(exc)) from None
    return slo, guard


@contextlib.contextmanager
def running_target(cfg: EngineConfig, args: argparse.Namespace) -> Iterator[EngineConfig]:
    """The config with a URL to load: its own, or a built-in sim started here (stopped on exit)."""
    if cfg.url != BUILTIN_SIM:
        yield cfg
        return
    from redline.engine.sim.serve import spawn_sim_process

    sim = spawn_sim_process(profile=args.profile or DEFAULT_PROFILE, seed=args.seed)
    try:
        yield dataclasses.replace(cfg, url=sim.url)
    finally:
        sim.stop()


def check_args(args: argparse.Namespace) -> None:
    """The options every command that loads a target has, checked before any connection;
    UsageError names the bad one."""
    if args.url is not None:
        try:
            validate_url(args.url)
        except TargetError as exc:
            raise UsageError(str(exc)) from None
        if args.profile is not None:
            raise UsageError(f"--profile {args.profile!r} picks a built-in sim profile; it cannot be used with --url")
    if args.profile is not None:
        from redline.engine.sim.profiles import get_profile

        try:
            get_profile(args.profile)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
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
            check_session_dir(compare)
        except SessionError as exc:
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


def workload_from_args(args: argparse.Namespace) -> WorkloadConfig:
    wl = WorkloadConfig(dataset=args.dataset, input_len=args.input_len, output_len=args.output_len, seed=args.seed)
    check_workload(wl)
    return wl


def workload_from_preset(preset: Preset, seed: int = 0) -> WorkloadConfig:
    w = preset.workload
    wl = WorkloadConfig(dataset=w.dataset, input_len=w.input_len, output_len=w.output_len, seed=seed)
    check_workload(wl)
    return wl


def check_workload(wl: WorkloadConfig) -> None:
    if wl.dataset != "random":
        try:
            load_dataset(wl.dataset, wl.output_len)
        except WorkloadError as exc:
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
    out: Path = args.out or default_session_dir()
    return EngineConfig(
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
        command_line=redact_argv(args.argv),
        seed=args.seed,
    )
