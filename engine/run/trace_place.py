"""Where a profiler capture's trace is written, and finding it when the server runs here.

SGLang names no path in its answers. Its scheduler writes
``<dir>/<profile_prefix>-<profile_id>-TP-<tp>[-DP-<dp>][-PP-<pp>][-EP-<ep>].trace.json.gz``, one
file per rank (0.5.9 ``managers/scheduler_profiler_mixin.py`` ``stop_profile``, 0.5.23
``managers/scheduler_components/profiler_manager.py``), where ``<dir>`` is the ``output_dir``
asked for, else ``SGLANG_TORCH_PROFILER_DIR``, whose default is ``/tmp`` (``srt/environ.py``);
``profile_id`` is the tokenizer's ``str(time.time())`` at the start. redline sends its own
``profile_prefix`` so its files can be told apart. vLLM writes into ``VLLM_TORCH_PROFILER_DIR``
(its profiler is off without it).

The directory is on the server's host. When the server's URL is this host's loopback, the
files are looked for there: the prefix's, else any trace written since the capture began.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["SGLANG_DEFAULT_PROFILER_DIR", "find_traces", "profiler_dir", "trace_pattern"]

SGLANG_DEFAULT_PROFILER_DIR = "/tmp"  # sglang srt/environ.py: SGLANG_TORCH_PROFILER_DIR = EnvStr("/tmp")
_SUFFIX = ".trace.json.gz"


def _server_env(info_raw: dict[str, Any], name: str) -> str | None:
    """An environment variable the server reports (0.5.23 ``internal_states[i].env_vars``, with
    SGLANG_EXPOSE_OWN_ENV_VARS)."""
    states = info_raw.get("internal_states")
    for st in states if isinstance(states, list) else ():
        env = st.get("env_vars") if isinstance(st, dict) else None
        if isinstance(env, dict) and isinstance(env.get(name), str) and env[name]:
            return env[name]
    return None


def profiler_dir(kind: str, output_dir: str | None, info_raw: dict[str, Any]) -> str | None:
    """The directory the server writes its trace into, as far as redline can know it: the one
    asked for, the one the server reports, else None (its own default)."""
    if output_dir:
        return output_dir
    name = "SGLANG_TORCH_PROFILER_DIR" if kind == "sglang" else "VLLM_TORCH_PROFILER_DIR"
    return _server_env(info_raw, name)


def trace_pattern(kind: str, output_dir: str | None, info_raw: dict[str, Any], prefix: str) -> str:
    """Where the trace is, in words, when no file was found here."""
    known = profiler_dir(kind, output_dir, info_raw)
    if kind == "sglang":
        where = f"{known.rstrip('/')}/" if known else f"{SGLANG_DEFAULT_PROFILER_DIR}/"
        note = "" if known else " (SGLANG_TORCH_PROFILER_DIR, default /tmp, on the server's host)"
        return f"{where}{prefix}-*{_SUFFIX}{note}"
    if known:
        return f"{known.rstrip('/')}/*{_SUFFIX} (on the server's host)"
    return "the server's VLLM_TORCH_PROFILER_DIR (on the server's host)"


def _dirs(kind: str, output_dir: str | None, info_raw: dict[str, Any]) -> list[Path]:
    known = profiler_dir(kind, output_dir, info_raw)
    if known:
        return [Path(known).expanduser()]
    name = "SGLANG_TORCH_PROFILER_DIR" if kind == "sglang" else "VLLM_TORCH_PROFILER_DIR"
    out = [Path(p).expanduser() for p in (os.environ.get(name), SGLANG_DEFAULT_PROFILER_DIR if kind == "sglang" else None) if p]
    return list(dict.fromkeys(out))


def find_traces(kind: str, output_dir: str | None, info_raw: dict[str, Any], prefix: str, t_start: float) -> list[str]:
    """The capture's trace files in the profiler's directory on this host, sorted; [] when none
    (or the directory is not here). Files named with ``prefix`` first; a server that ignored the
    prefix: the traces written since ``t_start`` (epoch seconds, a second's slack), except in
    the shared default /tmp."""
    for d in _dirs(kind, output_dir, info_raw):
        try:
            mine = sorted(str(p) for p in d.glob(f"{prefix}-*{_SUFFIX}")) if prefix else []
            if mine:
                return mine
            # a shared /tmp holds anyone's traces: there, only the prefix's are taken
            recent = [] if str(d) == SGLANG_DEFAULT_PROFILER_DIR else sorted(
                str(p) for p in d.glob(f"*{_SUFFIX}") if p.stat().st_mtime >= t_start - 1.0)
        except OSError:
            continue
        if recent:
            return recent
    return []
