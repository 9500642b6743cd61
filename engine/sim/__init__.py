"""redline's simulated LLM inference server (SGLang + OpenAI endpoints, no GPU needed).

Modules:

- :mod:`engine.sim.profiles`: :class:`SimProfile` and the named profiles.
- :mod:`engine.sim.model`: the continuous-batching scheduler (pure asyncio).
- :mod:`engine.sim.gpu`: simulated GPU utilisation, power, energy and memory.
- :mod:`engine.sim.tokens`: the fake tokenizer and generated token texts.
- :mod:`engine.sim.faults`: per-request fault draws, overload and crash rules.
- :mod:`engine.sim.stats`: request counters, one outcome per request.
- :mod:`engine.sim.wire`: request parsing and response shapes of the three APIs.
- :mod:`engine.sim.metrics`: SGLang ``/metrics`` and dcgm-exporter text.
- :mod:`engine.sim.http_app`: the aiohttp application and its handlers.
- :mod:`engine.sim.serve`: ``run_sim``, ``start_sim_thread``, ``spawn_sim_process``, CLI.
"""

from .profiles import PROFILES, SimProfile, get_profile

__all__ = ["PROFILES", "SimProfile", "get_profile"]
