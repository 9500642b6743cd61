"""The simulated server as tests read it: its settings for short answers, its exact counters (/sim/state)."""

from __future__ import annotations

import httpx


# -- the simulated server's exact counters (its /sim/state) ----------------------------------
def common_prefix_len(a: str, b: str) -> int:
    """How many leading characters two texts share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


#: sim settings that make a decode step short (TUI tests that want answers quickly)
FAST_SIM = ("--set", "decode_base_s=0.01", "--set", "decode_per_seq_s=0.0001")

#: the pp-capped profile as it was before its micro-batches followed SGLang (64 run there now):
#: one batch of at most 8 (60 ms a step) and a queue behind it; a --set after it wins
CAP8_SIM = ("--set", "pp_size=1", "--set", "max_running_requests=8", "--set", "decode_base_s=0.060",
            "--set", "decode_per_seq_s=0.0002")



def sim_state(url: str) -> dict:
    r = httpx.get(url + "/sim/state", timeout=5.0)
    r.raise_for_status()
    return r.json()


async def sim_state_async(url: str) -> dict:
    async with httpx.AsyncClient() as c:
        r = await c.get(url + "/sim/state", timeout=5.0)
        r.raise_for_status()
        return r.json()


def sim_running(url: str) -> int:
    """Requests the sim is running now."""
    return sim_state(url)["running"]


async def sim_running_async(url: str) -> int:
    return (await sim_state_async(url))["running"]
