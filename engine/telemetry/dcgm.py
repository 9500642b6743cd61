"""Per-GPU samples from NVIDIA dcgm-exporter's Prometheus text (default port 9400).

DCGM writes "blank" sentinels instead of leaving a field out when a GPU does not support
it, has no value yet, or is not permitted to read it; they are treated as missing (None),
never as 9.2e18 mJ of energy or a 2.1e9 °C GPU.

One exporter describes one host: GPUs are keyed by the ``gpu`` label. Several series for
one GPU (MIG instances) are merged: framebuffer sizes are summed, utilisation takes the
maximum, device-wide fields (power, temperature, energy, limit) take the first value.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

import httpx

from .poller import PromPoller
from .prom_text import PromParser, PromSamples, parse_prometheus
from .types import GpuSample

__all__ = ["DcgmPoller", "dcgm_parser", "gpu_samples_from_samples", "is_dcgm_blank", "parse_dcgm"]

# dcgm_structs.h: each blank has three neighbours (NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED).
DCGM_INT32_BLANK = 0x7FFFFFF0  # 2147483632
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # 9223372036854775792
DCGM_FP64_BLANK = 140737488355328.0  # 2**47
# Some exporters/versions print 2**57 (1.4411518807585587e+17) for a blank double.
_FP64_BLANK_ALT = 144115188075855872.0
# Anything this large is a sentinel in every field redline reads (2**47 mJ is 4.5 years at
# 1 kW; a real counter is reset at each driver load long before that).
_HUGE = DCGM_FP64_BLANK

POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"  # MiB (newer DCGM: total = used + free + reserved)
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"  # MiB (only when the exporter is told to collect it)
TEMP = "DCGM_FI_DEV_GPU_TEMP"  # °C
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since driver load
ENFORCED_LIMIT = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"  # W
MGMT_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"  # W
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"  # a label dcgm-exporter puts on each series (3.x and later)

_FIELDS = (POWER, UTIL, FB_USED, FB_FREE, FB_RESERVED, FB_TOTAL, TEMP, ENERGY, ENFORCED_LIMIT, MGMT_LIMIT)
_SUMMED = frozenset({FB_USED, FB_FREE, FB_RESERVED, FB_TOTAL})
_MAXED = frozenset({UTIL})
_DEVICE_DIGITS = re.compile(r"(\d+)$")


def is_dcgm_blank(value: float, *, int32: bool = True) -> bool:
    """True for NaN/Inf and DCGM's blank sentinels (int32, int64 and fp64 families).

    ``int32=False`` skips the int32 check, for int64 counters (energy in mJ) where
    2147483632 is an ordinary value.
    """
    if not math.isfinite(value):
        return True
    if int32 and DCGM_INT32_BLANK <= value <= DCGM_INT32_BLANK + 15:
        return True
    return abs(value) >= _HUGE  # int64 blanks, fp64 blank (2**47) and 2**57 alike


def _gpu_index(labels: dict[str, str]) -> int | None:
    gpu = labels.get("gpu")
    if gpu is not None and gpu.strip().isdigit():
        return int(gpu)
    m = _DEVICE_DIGITS.search(labels.get("device", ""))  # "nvidia3" -> 3
    return int(m.group(1)) if m else None


def gpu_samples_from_samples(samples: PromSamples) -> list[GpuSample]:
    """Build GpuSamples (sorted by index) from parsed dcgm-exporter samples."""
    values: dict[int, dict[str, float]] = {}
    names: dict[int, str] = {}
    drivers: dict[int, str] = {}
    for field in _FIELDS:
        series = samples.get(field) or samples.get(field + "_total") or ()
        for labels, value in series:
            idx = _gpu_index(labels)
            if idx is None:
                continue
            per_gpu = values.setdefault(idx, {})
            if idx not in names and labels.get("modelName"):
                names[idx] = labels["modelName"]
            if idx not in drivers and labels.get(DRIVER_LABEL):
                drivers[idx] = labels[DRIVER_LABEL]
            if is_dcgm_blank(value, int32=field != ENERGY):
                continue
            if field not in per_gpu:
                per_gpu[field] = value
            elif field in _SUMMED:
                per_gpu[field] += value
            elif field in _MAXED:
                per_gpu[field] = max(per_gpu[field], value)
    out = []
    for idx in sorted(values):
        v = values[idx]
        used, free = v.get(FB_USED), v.get(FB_FREE)
        if used is not None and free is not None:
            total: float | None = used + free + v.get(FB_RESERVED, 0.0)
        else:
            total = v.get(FB_TOTAL)
        limit = v.get(ENFORCED_LIMIT, v.get(MGMT_LIMIT))
        energy_mj = v.get(ENERGY)
        out.append(
            GpuSample(
                index=idx,
                name=names.get(idx, ""),
                power_w=v.get(POWER),
                power_limit_w=limit,
                util_pct=v.get(UTIL),
                mem_used_mib=used,
                mem_total_mib=total,
                temp_c=v.get(TEMP),
                energy_j=energy_mj / 1000.0 if energy_mj is not None else None,
                driver=drivers.get(idx, ""),
            )
        )
    return out


def dcgm_parser() -> PromParser:
    """A caching parser restricted to the DCGM fields read here (one per exporter)."""
    return PromParser(names=_FIELDS)


def parse_dcgm(text: str, *, parser: PromParser | None = None) -> list[GpuSample]:
    """Parse dcgm-exporter text into GpuSamples sorted by GPU index ([] when none).

    Power W, utilisation %, memory MiB (total = used + free [+ reserved]), temperature °C,
    energy J (from mJ), power limit W (enforced limit, else the management limit).
    Raises TelemetryParseError when the lines it reads are malformed. ``parser`` (from
    ``dcgm_parser()``) makes repeated scrapes of one exporter cheap.
    """
    samples = parser.parse(text) if parser is not None else parse_prometheus(text, names=_FIELDS)
    return gpu_samples_from_samples(samples)


class DcgmPoller(PromPoller):
    """Fetches and parses a dcgm-exporter /metrics; never raises on network or parse errors."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(client, url, _FIELDS, timeout_s=timeout_s, clock=clock)
        self.last: list[GpuSample] = []
        self.last_t: float | None = None  # clock() of the last successful poll

    async def poll(self) -> list[GpuSample] | None:
        """One GET + parse: the GPUs (never empty), or None on any failure, with the
        reason in ``.last_error`` (an answer with no GPU in it counts as a failure)."""
        got = await self._scrape()
        if got is None:
            return None
        samples, text, t = got
        gpus = gpu_samples_from_samples(samples)
        if not gpus:
            self._nothing(text, "no DCGM_FI_DEV_* GPU metrics (is this dcgm-exporter?)")
            return None
        self.last_error = None
        self.last = gpus
        self.last_t = t
        return gpus
