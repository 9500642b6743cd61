"""What was measured (meta.json `fingerprint`, docs/session-format.md): the server's kind,
version and arguments as it reports them, the launch command (a sweep's), the model, the GPUs
(name, count, driver, memory: NVML or dcgm-exporter), the host, redline's and Python's
versions; and what differs between two of them ("only pp_max_micro_batch_size differs"), so
two sweeps a week apart can be told apart.

    {"server": {"kind", "version", "args": {NAME: value}, "args_from": "server" | "launch command" | null},
     "launch_command": [...] | null, "model",
     "gpus": {"name", "count", "driver", "memory_mib", "source"} | null,
     "host", "redline_version", "python_version"}

SGLang reports its arguments at /server_info (/get_server_info): the top level holds what the
operator typed (`internal_states` the scheduler's effective limits, left out). vLLM serves its
version at /version and its whole configuration at /server_info only when started with
VLLM_SERVER_DEV_MODE=1 (`?config_format=json`: nested tables, flattened here to
`scheduler_config.max_num_seqs`); without it, the arguments are read from the launch command
(`--max-num-seqs 16` -> max_num_seqs: "16"), when there is one.
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any, Sequence

from .types import GpuSample

ASK_TIMEOUT_S = 5.0
# server info keys that are not arguments: what the server measured or is, not what it was told
NOT_ARGS = frozenset({"internal_states", "version", "redline_sim", "status", "vllm_env", "system_env"})
MAX_ARG_CHARS = 300  # a longer value (a chat template, a JSON blob) is kept cut, with its length
# an argument holding a credential (api_key, hf_token, ssl password, ...): its value is never kept
SECRET_PARTS = frozenset({"key", "token", "secret", "password", "passwd", "auth", "authorization", "bearer",
                          "credential", "credentials", "apikey"})
MASK = "***"


def secret_arg(name: str) -> bool:
    """Whether an argument's value is a credential, by the words of its name (max_total_tokens
    and tokenizer_path are not: whole words only)."""
    words = name.lower().replace("-", "_").replace(".", "_").split("_")
    return any(w in SECRET_PARTS for w in words)


def masked(args: dict[str, Any]) -> dict[str, Any]:
    return {k: (MASK if secret_arg(k) and v not in (None, False, "", 0) else v) for k, v in args.items()}


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float)):
        return v
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return text if len(text) <= MAX_ARG_CHARS else f"{text[:MAX_ARG_CHARS]}... ({len(text)} chars)"


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as dotted keys, every value a scalar (a list or long text as JSON text)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = _scalar(v)
    return out


def args_from_server_info(raw: dict[str, Any]) -> dict[str, Any]:
    """The arguments a server reports: SGLang's /server_info top level (its effective limits,
    `internal_states`, left out); vLLM's `vllm_config` (dev mode), flattened."""
    cfg = raw.get("vllm_config")
    if isinstance(cfg, dict):
        return flatten(cfg)
    if isinstance(cfg, str):  # an older vLLM, or config_format=text: `model='m', seed=0, ...` in one line
        return parse_config_text(cfg) or {"vllm_config": _scalar(cfg)}
    return flatten({k: v for k, v in raw.items() if k not in NOT_ARGS})


def parse_config_text(text: str) -> dict[str, Any]:
    """vLLM's configuration as text (`model='m', max_seq_len=4096, compilation_config={...}`):
    its top-level `key=value` pairs, split at the commas outside brackets and quotes ({} when
    it is not of that form)."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    out: dict[str, Any] = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not key.strip().isidentifier():
            return {}
        out[key.strip()] = _scalar(value.strip().strip("'\""))
    return out


def args_from_command(command: Sequence[str]) -> dict[str, Any]:
    """`--max-num-seqs 16 --enforce-eager --port=8000` -> {max_num_seqs: "16", enforce_eager:
    true, port: "8000"}: the options of a launch command (its program and positional words left out)."""
    out: dict[str, Any] = {}
    words = list(command)
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and len(w) > 2:
            name, eq, value = w[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                out[key] = value
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                out[key] = words[i + 1]
                i += 1
            else:
                out[key] = True
        i += 1
    return out


def server_kind(kind: str, raw: dict[str, Any]) -> str:
    """The server's kind, vLLM told apart by its dev-mode /server_info where detection could not."""
    return "vllm" if "vllm_config" in raw else kind


def gpu_part(gpus: Sequence[GpuSample], source: str) -> dict[str, Any] | None:
    """The GPUs as telemetry saw them: name (the first's; "A, B" when they differ), count,
    driver, memory of one (MiB); None when none was seen."""
    if not gpus:
        return None
    names = list(dict.fromkeys(g.name for g in gpus if g.name))
    drivers = list(dict.fromkeys(g.driver for g in gpus if g.driver))
    mems = [g.mem_total_mib for g in gpus if g.mem_total_mib]
    return {
        "name": ", ".join(names) or None, "count": len(gpus), "driver": ", ".join(drivers) or None,
        "memory_mib": round(max(mems)) if mems else None, "source": source,
    }


def fingerprint(*, kind: str, version: str, raw: dict[str, Any], model: str, launch_command: Sequence[str] | None,
                gpus: Sequence[GpuSample] = (), gpu_source: str = "", redline_version: str = "") -> dict[str, Any]:
    """meta.json's `fingerprint` from what the server said, the command that launched it and
    the GPUs telemetry saw."""
    args = args_from_server_info(raw) if raw else {}
    args_from: str | None = "server" if args else None
    if not args and launch_command:
        args, args_from = args_from_command(launch_command), "launch command"
    return {
        "server": {"kind": server_kind(kind, raw), "version": version or None, "args": masked(args), "args_from": args_from},
        "launch_command": list(launch_command) if launch_command else None,
        "model": model or None,
        "gpus": gpu_part(gpus, gpu_source),
        "host": socket.gethostname(),
        "redline_version": redline_version or None,
        "python_version": ".".join(str(x) for x in sys.version_info[:3]),  # platform.python_version() without importing platform
    }


async def ask_server(client: Any, base: str, kind: str, raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a server says of itself beyond detection (an httpx.AsyncClient): vLLM's /version,
    and its /server_info?config_format=json where dev mode serves it. (version, raw); a server
    that does not answer leaves both as they were."""
    version = str(raw.get("version") or "") if isinstance(raw.get("version"), str) else ""
    if kind == "sglang" and "vllm_config" not in raw:
        return version, raw
    v = await _get_json(client, base + "/version")
    if isinstance(v, dict) and isinstance(v.get("version"), str):
        version = v["version"]
    if "vllm_config" not in raw and version:  # vLLM (it serves /version): its configuration, in dev mode
        info = await _get_json(client, base + "/server_info?config_format=json")
        if isinstance(info, dict) and "vllm_config" in info:
            raw = {"vllm_config": info["vllm_config"]}
    return version, raw


async def _get_json(client: Any, url: str) -> Any:
    try:
        r = await client.get(url, timeout=ASK_TIMEOUT_S)
        if r.status_code != 200:
            return None
        return json.loads(r.content)
    except Exception:  # noqa: BLE001 - a server that does not say is a fingerprint without it
        return None


# -- what differs -------------------------------------------------------------------------------

IGNORED = frozenset({"host", "launch_command"})  # said apart, beside the arguments' differences
# launch details that differ between any two launches of one configuration; and SGLang
# 0.5.23's own `launch_command` server argument, which restates the others (they are compared
# one by one: "only pp_max_micro_batch_size differs", not "2 differ: ..., launch_command")
VOLATILE_ARGS = frozenset({"port", "host", "seed", "random_seed", "redline_sim.seed", "launch_command"})


def _flat(fp: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    server = got if isinstance(got := fp.get("server"), dict) else {}
    for k, v in (server.get("args") or {}).items():
        if k not in VOLATILE_ARGS:
            out[k] = v
    out["server kind"] = server.get("kind")
    out["server version"] = server.get("version")
    out["model"] = fp.get("model")
    gpus = got if isinstance(got := fp.get("gpus"), dict) else {}
    for k in ("name", "count", "driver", "memory_mib"):
        out[f"GPU {k.replace('_mib', ' MiB')}"] = gpus.get(k)
    out["redline version"] = fp.get("redline_version")
    out["Python version"] = fp.get("python_version")
    return out


def differences(fps: Sequence[dict[str, Any]]) -> list[str]:
    """The names (arguments first, as the server names them; then kind, version, model, GPUs,
    versions) whose values are not the same in every fingerprint; one missing counts as a
    difference only where another has a value."""
    flats = [_flat(fp) for fp in fps if isinstance(fp, dict)]
    if len(flats) < 2:
        return []
    names = list(dict.fromkeys(k for f in flats for k in f))
    return [k for k in names if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1]


def differences_text(fps: Sequence[dict[str, Any]]) -> str | None:
    """One line: "only pp_max_micro_batch_size differs", "3 differ: a, b, c", "nothing
    differs"; None with fewer than two fingerprints."""
    fps = [fp for fp in fps if isinstance(fp, dict) and fp]
    if len(fps) < 2:
        return None
    d = differences(fps)
    if not d:
        return "fingerprints: nothing differs (server, arguments, model, GPUs, versions)"
    if len(d) == 1:
        return f"fingerprints: only {d[0]} differs"
    shown = ", ".join(d[:8]) + (f", ... ({len(d) - 8} more)" if len(d) > 8 else "")
    return f"fingerprints: {len(d)} differ: {shown}"


def describe(fp: dict[str, Any]) -> str:
    """One line of a fingerprint: `sglang 0.5.9, redline-sim-70b, 8 x NVIDIA H100 (driver 550.54), host h1`."""
    server = fp.get("server") or {}
    gpus = fp.get("gpus") or {}
    parts = [" ".join(str(x) for x in (server.get("kind"), server.get("version")) if x)]
    if fp.get("model"):
        parts.append(str(fp["model"]))
    if gpus:
        g = f"{gpus.get('count')} x {gpus.get('name') or 'GPU'}"
        if gpus.get("driver"):
            g += f" (driver {gpus['driver']})"
        parts.append(g)
    if fp.get("host"):
        parts.append(f"host {fp['host']}")
    return ", ".join(p for p in parts if p)


__all__ = ["args_from_command", "args_from_server_info", "ask_server", "describe", "differences", "differences_text",
           "fingerprint", "flatten", "gpu_part"]
