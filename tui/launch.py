"""From parsed arguments to a running target and an EngineConfig, checked before connecting."""

from __future__ import annotations

import argparse
import contextlib
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


def check_args(args: argparse.Namespace) -> None:
    """Every user value checked before any connection; UsageError names the bad one."""
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
    conc = getattr(args, "concurrency", None)
    if conc is not None and conc > args.max_concurrency:
        raise UsageError(f"--concurrency {conc}: above --max-concurrency {args.max_concurrency}")
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


@contextlib.contextmanager
def target_url(args: argparse.Namespace, preset_url: str | None = None) -> Iterator[str]:
    """The URL to load: --url, the preset's, or a built-in sim started (and stopped) here."""
    url = args.url or preset_url
    if url is not None:
        yield url
        return
    from redline.engine.sim.serve import spawn_sim_process

    sim = spawn_sim_process(profile=args.profile or DEFAULT_PROFILE, seed=args.seed)
    try:
        yield sim.url
    finally:
        sim.stop()


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
