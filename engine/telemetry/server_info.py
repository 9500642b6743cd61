"""What the target told us about itself (SGLang /get_server_info, OpenAI /v1/models)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServerInfo:
    kind: str = "openai"  # "sglang" | "vllm" | "openai" (any other OpenAI-compatible server)
    model: str = ""
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    tp_size: int | None = None
    pp_size: int | None = None
    dp_size: int | None = None
    pp_micro_batch_cap: int | None = None  # SGLang pp: max_running_requests // pp_size
    max_num_seqs: int | None = None  # vLLM's --max-num-seqs when known
    version: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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
        if self.pp_micro_batch_cap:
            parts.append(f"micro-batch cap={self.pp_micro_batch_cap}")
        return " ".join(parts)

    @classmethod
    def from_sglang(cls, info: dict[str, Any], model: str = "") -> "ServerInfo":
        """Read SGLang's flattened server args (plus the sim's own block)."""

        def as_int(key: str) -> int | None:
            v = info.get(key)
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        mrr = as_int("max_running_requests")
        pp = as_int("pp_size")
        cap = None
        sim = info.get("redline_sim")
        if isinstance(sim, dict) and isinstance(sim.get("pp_max_micro_batch_size"), int):
            cap = sim["pp_max_micro_batch_size"]
        elif isinstance(info.get("pp_max_micro_batch_size"), int):
            cap = info["pp_max_micro_batch_size"]
        elif mrr and pp and pp > 1:
            cap = mrr // pp
        name = model or str(info.get("served_model_name") or info.get("model_path") or "")
        return cls(
            kind="sglang",
            model=name,
            max_running_requests=mrr,
            max_total_tokens=as_int("max_total_tokens"),
            tp_size=as_int("tp_size"),
            pp_size=pp,
            dp_size=as_int("dp_size"),
            pp_micro_batch_cap=cap,
            version=str(info.get("version") or ""),
            raw=info,
        )
