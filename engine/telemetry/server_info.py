"""What the target told us about itself (SGLang /server_info, OpenAI /v1/models).

SGLang's answer, as its code builds it (``srt/entrypoints/http_server.py`` ``server_info``):

- the **top level** is the server's arguments (0.5.9: ``dataclasses.asdict(server_args)`` of
  the tokenizer's process, what the operator typed, None where they typed nothing; 0.5.23:
  ``server_args.resolved_dict()``, the startup configuration) plus the scheduler's startup
  answer (``status``, ``max_total_num_tokens``: the KV cache's size in tokens,
  ``max_req_input_len``) and ``version``;
- ``internal_states``: one dict per data-parallel scheduler (0.5.9
  ``Scheduler.get_internal_state``, 0.5.23 ``scheduler_components/internal_state.py``), the
  scheduler's own arguments *after* it derived its limits: ``pp_max_micro_batch_size``
  (``max_running_requests // pp_size`` when not typed, ``scheduler.py``),
  ``effective_max_running_requests_per_dp`` and ``memory_usage.token_capacity``.

So an effective limit is read from ``internal_states[0]`` first, then the top level.
``/get_server_info`` is the deprecated spelling (it logs a warning on every call): redline asks
``/server_info`` first (``SERVER_INFO_PATHS``).

The top level carries ``api_key`` and ``admin_api_key`` in clear (``/server_info`` needs no admin
key). :func:`scrub_server_info` masks every credential-named value before the info is kept
(``ServerInfo.raw`` is what meta.json gets); the values masked are kept apart
(``ServerInfo.secrets``) so the session's scrubber masks them wherever else they turn up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..constants import SECRET_MASK

__all__ = [
    "CACHE_REPORT_MIN_REQUESTS", "SERVER_INFO_PATHS", "ServerInfo", "cache_report_hint", "credential_name",
    "looks_like_sglang", "scrub_server_info",
]

#: SGLang's server info, the current path first (the second is deprecated since 0.5.x).
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
#: Completed requests of a shared-prefix workload none of which said what was cached, before
#: redline says how to make the server report it
CACHE_REPORT_MIN_REQUESTS = 8

# Words that make a key's value a credential: `api_key`, `admin_api_key`, `hf_token`,
# `ssl_keyfile_password`, `watermark_key`, ... (whole words of a snake_case or camelCase name,
# so `tokenizer_path` and `max_total_num_tokens` are not).
_CREDENTIAL_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential", "credentials",
    "auth", "authorization", "bearer", "cookie",
})
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(://[^/@:\s]*:)([^/@\s]+)@")


def looks_like_sglang(info: dict[str, Any]) -> bool:
    """Whether a JSON answer of a server-info path is SGLang's (its arguments), not another
    server's page of that name (vLLM's dev-mode /server_info is ``{"vllm_config": ...}``)."""
    return any(k in info for k in ("internal_states", "tp_size", "model_path", "served_model_name"))


def credential_name(name: str) -> bool:
    """Whether a key of the server's info names a credential, by its words."""
    words = _WORD_SPLIT.split(_CAMEL.sub("_", name).lower())
    return any(w in _CREDENTIAL_WORDS for w in words)


def scrub_server_info(info: Any) -> tuple[Any, tuple[str, ...]]:
    """(a copy of ``info`` with every credential masked, the values masked).

    A credential is the value of a key :func:`credential_name` calls one (a string, or a list
    of strings: an empty one or None stays, so the reader sees that none was set), the password
    of a URL (``http://user:PASS@host``), and any other occurrence of a masked value in a
    string (a launch command that repeats ``--api-key X``)."""
    found: set[str] = set()

    def mask(o: Any, secret: bool) -> Any:
        if isinstance(o, dict):
            return {k: mask(v, secret or (isinstance(k, str) and credential_name(k))) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [mask(v, secret) for v in o]
        if isinstance(o, str):
            if secret and o:
                found.add(o)
                return SECRET_MASK
            for m in _URL_USERINFO.finditer(o):
                found.add(m.group(2))
            return _URL_USERINFO.sub(lambda m: m.group(1) + SECRET_MASK + "@", o)
        return o

    out = mask(info, False)
    if not found:
        return out, ()
    longest_first = sorted(found, key=len, reverse=True)

    def again(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: again(v) for k, v in o.items()}
        if isinstance(o, list):
            return [again(v) for v in o]
        if isinstance(o, str) and o != SECRET_MASK:
            for s in longest_first:
                o = o.replace(s, SECRET_MASK)
        return o

    return again(out), tuple(longest_first)


def _int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _flag(d: dict[str, Any], key: str) -> bool | None:
    v = d.get(key)
    return v if isinstance(v, bool) else None


@dataclass(frozen=True)
class ServerInfo:
    kind: str = "openai"  # "sglang" | "vllm" | "openai" (any other OpenAI-compatible server)
    model: str = ""
    # SGLang: the scheduler's effective running-request cap, per data-parallel scheduler
    # (internal_states' effective_max_running_requests_per_dp, else what was typed)
    max_running_requests: int | None = None
    max_total_tokens: int | None = None  # the KV cache's size in tokens (max_total_num_tokens)
    tp_size: int | None = None
    pp_size: int | None = None
    dp_size: int | None = None  # data-parallel replicas (each its own scheduler)
    pp_micro_batch_cap: int | None = None  # SGLang pp: pp_max_micro_batch_size (max_running_requests // pp_size by default)
    max_num_seqs: int | None = None  # vLLM's --max-num-seqs when known
    version: str = ""
    # attention data-parallel width (0.5.23 attn_dp_size; 0.5.9 --dp-size N --enable-dp-attention):
    # that many schedulers inside one tensor-parallel group, each with its own running batch
    attn_dp_size: int | None = None
    pp_async_batch_depth: int | None = None  # SGLang pp: micro-batches beyond pp_size
    cache_report: bool | None = None  # SGLang --enable-cache-report (cached tokens on OpenAI usage)
    priority_scheduling: bool | None = None  # SGLang --enable-priority-scheduling
    admin_key_set: bool = False  # SGLang --admin-api-key: /flush_cache and the profiler need it
    api_key_set: bool = False  # SGLang --api-key
    source: str = ""  # the path that answered (/server_info, /get_server_info)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # credentials masked
    secrets: tuple[str, ...] = field(default=(), compare=False, repr=False)  # the values masked in raw

    @property
    def dp_ranks(self) -> int:
        """Schedulers, each with its own running batch and cap: dp replicas x attention-DP width."""
        return max(1, self.dp_size or 1) * max(1, self.attn_dp_size or 1)

    @property
    def pp_micro_batches(self) -> int | None:
        """Micro-batches SGLang keeps in flight under pipeline parallelism (scheduler_pp_mixin.py
        pp_loop_size: pp_size + pp_async_batch_depth), None without pp."""
        if not self.pp_size or self.pp_size < 2:
            return None
        return self.pp_size + (self.pp_async_batch_depth or 0)

    def caps_text(self) -> str:
        """Short text for the header: 'max_running=64 tp=1 pp=8 micro-batch cap=8'."""
        parts = []
        if self.max_running_requests:
            parts.append(f"max_running={self.max_running_requests}")
        if self.max_num_seqs:
            parts.append(f"max_num_seqs={self.max_num_seqs}")
        if self.tp_size:
            parts.append(f"tp={self.tp_size}")
        if self.pp_size:
            parts.append(f"pp={self.pp_size}")
        if self.dp_size and self.dp_size > 1:
            parts.append(f"dp={self.dp_size}")
        if self.attn_dp_size and self.attn_dp_size > 1:
            parts.append(f"attn_dp={self.attn_dp_size}")
        if self.pp_micro_batch_cap:
            parts.append(f"micro-batch cap={self.pp_micro_batch_cap}")
        return " ".join(parts)

    @classmethod
    def from_sglang(cls, info: dict[str, Any], model: str = "", source: str = "") -> "ServerInfo":
        """Read SGLang's server info: effective limits from ``internal_states[0]``, then the top
        level (plus the sim's own ``redline_sim`` block); credentials masked in ``raw``."""
        states = info.get("internal_states")
        st: dict[str, Any] = next((s for s in states if isinstance(s, dict)), {}) if isinstance(states, list) else {}

        def eff(key: str) -> int | None:
            v = _int(st, key)
            return v if v is not None else _int(info, key)

        tp, pp, dp = eff("tp_size"), eff("pp_size"), eff("dp_size")
        attn_dp = eff("attn_dp_size")
        if attn_dp is None and _flag(info, "enable_dp_attention") and dp and dp > 1:
            attn_dp, dp = dp, 1  # 0.5.9: --dp-size N --enable-dp-attention is N attention-DP ranks in one TP group
        mrr = _int(st, "effective_max_running_requests_per_dp")
        if mrr is None:
            typed = eff("max_running_requests")
            # typed under attention DP, it is the total (model_runner.py divides it by the width)
            mrr = typed // attn_dp if typed and attn_dp and attn_dp > 1 else typed
        sim = info.get("redline_sim")
        sim_cap = _int(sim, "pp_max_micro_batch_size") if isinstance(sim, dict) else None
        cap = None
        if pp and pp > 1:  # (with pp 1 SGLang still sets it, to max_running_requests: no cap of its own)
            cap = _int(st, "pp_max_micro_batch_size") or sim_cap or _int(info, "pp_max_micro_batch_size")
            if cap is None and mrr:
                cap = max(mrr // pp, 1)  # SGLang's own default (scheduler.py)
        elif sim_cap is not None:
            cap = sim_cap  # the sim's cap without pp (--set pp_max_micro_batch_size=N)
        usage = got if isinstance(got := st.get("memory_usage"), dict) else {}
        kv = _int(info, "max_total_num_tokens") or _int(st, "max_total_num_tokens") or _int(usage, "token_capacity") or _int(info, "max_total_tokens")
        raw, secrets = scrub_server_info(info)
        name = model or str(raw.get("served_model_name") or raw.get("model_path") or "")
        return cls(
            kind="sglang",
            model=name,
            max_running_requests=mrr,
            max_total_tokens=kv,
            tp_size=tp,
            pp_size=pp,
            dp_size=dp,
            pp_micro_batch_cap=cap,
            version=str(info.get("version") or ""),
            attn_dp_size=attn_dp,
            pp_async_batch_depth=eff("pp_async_batch_depth"),
            cache_report=_flag(info, "enable_cache_report"),
            priority_scheduling=_flag(info, "enable_priority_scheduling"),
            admin_key_set=bool(info.get("admin_api_key")),
            api_key_set=bool(info.get("api_key")),
            source=source,
            raw=raw,
            secrets=secrets,
        )


def cache_report_hint(info: ServerInfo | None, api: str, *, completed: int | None = None, reported: int = 0) -> str | None:
    """Why a workload that asks for cached tokens (shared prefixes, multi-turn) sees none, and
    what to enable; None when nothing is to be said.

    SGLang puts ``usage.prompt_tokens_details.cached_tokens`` on chat/completions only with
    ``--enable-cache-report`` (``entrypoints/openai/usage_processor.py``; off by default), and
    0.5.9 never on a per-chunk usage (``serving_chat.py``: continuous usage stats carry prompt and
    completion tokens only); ``/generate``'s ``meta_info.cached_tokens`` is always there. A
    server info saying the report is off is told at once; without it, once ``completed``
    requests (at least CACHE_REPORT_MIN_REQUESTS) came back and none of them said (``reported``)."""
    if info is None or api not in ("chat", "completions"):
        return None
    if info.kind == "sglang":
        if info.cache_report is True:
            return None
        how = ("start SGLang with --enable-cache-report (its chat/completions answers carry none without it), "
               "or load /generate (--api generate), whose meta_info always has them")
        if info.cache_report is False:
            return f"cached tokens: this SGLang server was started without --enable-cache-report: {how}"
        if completed is not None and completed >= CACHE_REPORT_MIN_REQUESTS and not reported:
            return f"cached tokens: none of {completed} answers said how many prompt tokens were cached: {how}"
        return None
    if info.kind == "vllm" and completed is not None and completed >= CACHE_REPORT_MIN_REQUESTS and not reported:
        return (f"cached tokens: none of {completed} answers said how many prompt tokens were cached: "
                "vLLM reports them with --enable-prompt-tokens-details")
    return None
