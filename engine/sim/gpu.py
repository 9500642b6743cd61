"""Simulated GPUs: utilisation and power follow the running batch, energy integrates power.

``util = min(1, batch / saturation_batch) * util_ceiling`` and
``power = idle_w + (peak_w - idle_w) * util``, each GPU offset by a small fixed, seeded amount
so the eight lines of a panel are told apart. Memory used is the weights plus the GPU's share
of the KV tokens in use.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from .profiles import SimProfile

__all__ = ["GpuFleet", "GpuReading"]


@dataclass(frozen=True)
class GpuReading:
    """One simulated GPU at one moment."""

    index: int
    uuid: str
    pci_bus_id: str
    util_pct: int
    power_w: float
    limit_w: float
    energy_mj: int
    fb_used_mib: int
    fb_free_mib: int


class GpuFleet:
    """The server's GPUs; told the batch size by the model, read by /dcgm/metrics."""

    def __init__(
        self, profile: SimProfile, seed: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._profile = profile
        self._clock = clock
        rng = random.Random(f"redline-sim-gpus:{seed}")
        n = profile.gpus
        self._uuids = [f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}" for _ in range(n)]
        self._jitter = [rng.uniform(-0.02, 0.02) for _ in range(n)]
        # Energy counters count since "boot", so they start well above zero.
        self._energy_j = [rng.uniform(1.0e6, 5.0e6) for _ in range(n)]
        self._batch = 0.0
        self._last = clock()

    @property
    def batch(self) -> float:
        """The batch size the GPUs are running now."""
        return self._batch

    def set_batch(self, batch: float) -> None:
        """Account energy up to now, then switch to the new batch size."""
        self._integrate()
        self._batch = batch

    def util(self) -> float:
        """Utilisation 0..1 shared by all GPUs (before the per-GPU offset)."""
        p = self._profile
        if self._batch <= 0:
            return 0.0
        return min(1.0, self._batch / p.saturation_batch) * p.util_ceiling

    def _power(self, i: int, util: float) -> float:
        p = self._profile
        watts = (p.gpu_idle_w + (p.gpu_peak_w - p.gpu_idle_w) * util) * (1.0 + self._jitter[i])
        return min(watts, p.gpu_limit_w)

    def _integrate(self) -> None:
        now = self._clock()
        dt = now - self._last
        self._last = now
        if dt <= 0:
            return
        util = self.util()
        for i in range(len(self._energy_j)):
            self._energy_j[i] += self._power(i, util) * dt

    def readings(self, kv_used_tokens: int) -> list[GpuReading]:
        """Every GPU now; ``kv_used_tokens`` is the model's KV occupancy."""
        self._integrate()
        p = self._profile
        util = self.util()
        kv_mib = kv_used_tokens * p.kv_mib_per_token / p.gpus
        used = min(p.gpu_memory_mib, int(p.weights_mib_per_gpu + kv_mib))
        out: list[GpuReading] = []
        for i in range(p.gpus):
            gpu_util = min(1.0, util * (1.0 + self._jitter[i])) if util else 0.0
            out.append(
                GpuReading(
                    index=i,
                    uuid=self._uuids[i],
                    pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                    util_pct=round(gpu_util * 100),
                    power_w=round(self._power(i, util), 3),
                    limit_w=p.gpu_limit_w,
                    energy_mj=int(self._energy_j[i] * 1000),
                    fb_used_mib=used,
                    fb_free_mib=p.gpu_memory_mib - used,
                )
            )
        return out
