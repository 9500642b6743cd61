"""The sim's ``/server_info`` (and ``/get_server_info``), built as each SGLang version builds it.

Read from the wheels (``srt/entrypoints/http_server.py`` ``server_info``; 0.5.23
``srt/utils/common.py`` ``build_server_info``):

- the **top level** is the launch arguments: every ServerArgs field, with what the operator
  typed and SGLang's declared default for the rest (None for a limit the scheduler derives:
  ``max_running_requests``, ``pp_max_micro_batch_size``, ``chunked_prefill_size``,
  ``max_total_tokens``, ``context_length``). The fields and defaults are the wheels' own
  (``sglang_args/<version>.json``, written by tests/fixtures/sglang/make_fixtures.py from 0.5.9
  ``srt/server_args.py`` and 0.5.23 ``srt/arg_groups/fields/*.py``). Which of the profile's
  values count as typed: ``SimProfile.typed_args`` (and every ``--set`` of one). Then the
  scheduler's startup answer (``status``, ``max_total_num_tokens``, ``max_req_input_len``;
  ``managers/scheduler.py`` ``run_scheduler_process``), 0.5.23's ``launch_command``,
  ``startup_time``, ``hicache_object_layout``, ``kv_events``, ``frontend``, and ``version``;
- ``internal_states``: one dict per data-parallel scheduler, its arguments *after* it derived
  its limits (``pp_max_micro_batch_size = max(max_running_requests // pp_size, 1)``,
  ``scheduler.py``), ``last_gen_throughput``, ``memory_usage`` (``token_capacity``),
  ``effective_max_running_requests_per_dp`` (0.5.9 ``Scheduler.get_internal_state``, 0.5.23
  ``managers/scheduler_components/internal_state.py``: also ``world_size``, ``startup_time``);
- ``/get_server_info`` is the deprecated alias: the same body, a warning logged on each call.

Beside SGLang's keys the sim adds its own ``redline_sim`` block (profile, seed, settings).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

from .profiles import SGLANG_ARG_NAMES, SimProfile

__all__ = ["sglang_args", "server_info"]

_ARGS_DIR = Path(__file__).parent / "sglang_args"
#: what the startup answer says the longest prompt may be, below the context length
_INPUT_MARGIN = 6


@functools.lru_cache(maxsize=4)
def sglang_args(version: str) -> dict[str, Any]:
    """SGLang ``version``'s launch arguments and their defaults (a copy is the caller's)."""
    return json.loads((_ARGS_DIR / f"{version}.json").read_text())["args"]


def _typed(p: SimProfile) -> dict[str, Any]:
    """The SGLang arguments the profile's operator typed, by SGLang's names."""
    out: dict[str, Any] = {}
    for fld in p.typed():
        name = SGLANG_ARG_NAMES.get(fld)
        if name is None:
            continue
        out[name] = getattr(p, fld)
    return out


def _launch_command(typed: dict[str, Any]) -> str:
    parts = ["python -m sglang.launch_server", "--model-path redline-sim/<model>"]
    for k, v in typed.items():
        parts.append(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}"))
    return " ".join(parts)


def server_info(p: SimProfile, *, gen_throughput: float, startup_time: float, seed: int) -> dict[str, Any]:
    """The /server_info body of a server of profile ``p``."""
    version = p.sglang_version
    args = dict(sglang_args(version))
    model = f"redline-sim/{p.model_name}"
    typed = _typed(p)
    args.update({"model_path": model, "tokenizer_path": model, "served_model_name": p.model_name, "enable_metrics": True,
                 **typed})
    dp = max(1, p.dp_size)
    mrr = p.max_running_requests // dp if p.dp_size > 1 else p.max_running_requests
    state = dict(args)
    state.update(max_running_requests=p.max_running_requests, chunked_prefill_size=p.chunked_prefill_size,
                 context_length=p.max_model_len)
    # the scheduler's own derivation: max(max_running_requests // pp_size, 1), else as typed
    state["pp_max_micro_batch_size"] = p.pp_max_micro_batch_size or max(mrr // max(p.pp_size, 1), 1)
    state["last_gen_throughput"] = gen_throughput
    usage: dict[str, Any] = {"weight": round(p.weights_mib_per_gpu / 1024, 2),
                             "kvcache": round(p.kv_budget_tokens * p.kv_mib_per_token / p.gpus / 1024, 2),
                             "token_capacity": p.kv_budget_tokens, "graph": 1.86}
    if version != "0.5.9":
        usage.update(startup_available=round(p.gpu_memory_mib / 1024, 2), token_capacity_swa=None, graph={"decode": 1.86})
    state["memory_usage"] = usage
    state["effective_max_running_requests_per_dp"] = mrr
    if version != "0.5.9":
        state.update(world_size=p.tp_size * p.pp_size * dp, startup_time=startup_time)
    top = dict(args)
    if version != "0.5.9":
        top["launch_command"] = _launch_command(typed)
    top.update(status="ready", max_total_num_tokens=p.kv_budget_tokens, max_req_input_len=p.max_model_len - _INPUT_MARGIN)
    if version != "0.5.9":
        top.update(hicache_object_layout=None, kv_events=None, startup_time=startup_time)
    top["internal_states"] = [dict(state) for _ in range(dp)]
    top["version"] = version
    if version != "0.5.9":
        top["frontend"] = "python"
    top["redline_sim"] = {
        "profile": p.name, "gpus": p.gpus,
        "pp_max_micro_batch_size": p.micro_batch_cap if p.pp_size > 1 else p.pp_max_micro_batch_size,
        "running_cap": p.running_cap, "seed": seed, "settings": dataclasses.asdict(p),
    }
    return top
