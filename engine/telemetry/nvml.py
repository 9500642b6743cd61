"""Local GPUs through NVML (nvidia-ml-py's ``pynvml``).

Every call here blocks (NVML serialises on driver locks, and a power read can take a
millisecond or more per GPU): call ``open``/``sample``/``close`` from a worker thread
(``asyncio.to_thread``), never on the event loop that timestamps tokens. A lock makes
``sample`` and ``close`` safe to call from different threads.

No NVML library, no driver, or no GPU is a normal situation (a laptop, a CPU box, the
simulator): ``open`` returns a one-line notice and ``sample`` returns [].
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..text import one_line
from .types import GpuSample

__all__ = ["NvmlSource", "NVML_ABSENT_PREFIX"]

NVML_ABSENT_PREFIX = "no local GPU telemetry (NVML: "
_MIB = 1024 * 1024


class NvmlSource:
    """Per-GPU power, limit, utilisation, memory, temperature and energy from NVML.

    ``backend`` defaults to the real ``pynvml`` module; tests pass an object with the same
    function names (and ``NVMLError`` / ``NVMLError_NotSupported`` classes).
    """

    def __init__(self, backend: Any = None) -> None:
        # pynvml (nvidia-ml-py: no type hints) or a test's stand-in with its names: Any, untyped
        self._backend: Any = backend
        self._handles: list[Any] = []
        self._names: list[str] = []
        self._driver = ""  # nvmlSystemGetDriverVersion, read once at open
        self._unsupported: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._open = False
        self.notice: str | None = None  # set by open() when NVML is unusable
        self.last_error: str | None = None  # last unexpected per-field NVML error

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def gpu_count(self) -> int:
        return len(self._handles)

    def open(self) -> str | None:
        """Initialise NVML and find the GPUs. None when usable, else the one-line notice
        ``"no local GPU telemetry (NVML: <reason>)"``. Never raises."""
        with self._lock:
            if self._open:
                return None
            try:
                if self._backend is None:
                    import pynvml  # nvidia-ml-py; imported lazily, it is optional at runtime

                    self._backend = pynvml
                nv = self._backend
                nv.nvmlInit()
            except Exception as exc:  # NVMLError_LibraryNotFound, OSError, ImportError, ...
                return self._absent(exc)
            try:
                count = int(nv.nvmlDeviceGetCount())
                handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
                names = [self._name(h) for h in handles]
            except Exception as exc:
                self._shutdown_quietly()
                return self._absent(exc)
            if not handles:
                self._shutdown_quietly()
                return self._absent("no GPUs found")
            self._handles, self._names = handles, names
            self._driver = self._driver_version()
            self._unsupported.clear()
            self._open = True
            self.notice = None
            return None

    def sample(self) -> list[GpuSample]:
        """One reading of every GPU (blocking). [] when not open. A field the GPU does not
        support (or that fails) is None; never raises."""
        with self._lock:
            if not self._open:
                return []
            return [self._sample_one(i, h) for i, h in enumerate(self._handles)]

    def close(self) -> None:
        """Shut NVML down (blocking; waits for a sample in progress). Never raises."""
        with self._lock:
            if self._open:
                self._shutdown_quietly()
            self._open = False
            self._handles, self._names = [], []

    # -- internals -------------------------------------------------------------------

    def _sample_one(self, i: int, h: object) -> GpuSample:
        """GPU i's reading (the lock held, NVML open): each field on its own, None where it fails."""
        nv = self._backend
        power_mw = self._read(i, "power", lambda: nv.nvmlDeviceGetPowerUsage(h))
        limit_mw = self._read(i, "limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
        util = self._read(i, "util", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = self._read(i, "mem", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        temp = self._read(i, "temp", lambda: self._temperature(h))
        energy_mj = self._read(i, "energy", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h))
        return GpuSample(
            index=i,
            name=self._names[i],
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
            util_pct=float(util) if util is not None else None,
            mem_used_mib=mem.used / _MIB if mem is not None else None,
            mem_total_mib=mem.total / _MIB if mem is not None else None,
            temp_c=float(temp) if temp is not None else None,
            energy_j=energy_mj / 1000.0 if energy_mj is not None else None,
            driver=self._driver,
        )


    def _absent(self, why: object) -> str:
        reason = one_line(why, 160, ellipsis=True) or type(why).__name__
        self.notice = f"{NVML_ABSENT_PREFIX}{reason})"
        return self.notice

    # device_ref: pynvml's device handle, an untyped ctypes pointer (Any: the third-party type)
    def _name(self, device_ref: Any) -> str:
        try:
            name = self._backend.nvmlDeviceGetName(device_ref)
        except Exception:
            return ""
        return name.decode(errors="replace") if isinstance(name, bytes) else str(name)

    def _driver_version(self) -> str:
        try:
            v = self._backend.nvmlSystemGetDriverVersion()
        except Exception:
            return ""
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)

    def _temperature(self, device_ref: Any) -> Any:
        """nvmlDeviceGetTemperature, or its successor where a driver no longer has it."""
        nv = self._backend
        try:
            return nv.nvmlDeviceGetTemperature(device_ref, nv.NVML_TEMPERATURE_GPU)
        except Exception as exc:
            missing = getattr(nv, "NVMLError_FunctionNotFound", None)
            if missing is None or not isinstance(exc, missing) or not hasattr(nv, "nvmlDeviceGetTemperatureV"):
                raise
            return nv.nvmlDeviceGetTemperatureV(device_ref, nv.NVML_TEMPERATURE_GPU)

    def _read(self, gpu: int, field: str, call: Callable[[], Any]) -> Any:
        """One NVML read; None when unsupported (remembered, not retried) or failing."""
        if (gpu, field) in self._unsupported:
            return None
        nv = self._backend
        unsupported = tuple(
            c
            for c in (getattr(nv, "NVMLError_NotSupported", None), getattr(nv, "NVMLError_FunctionNotFound", None))
            if isinstance(c, type)
        )
        nvml_error = getattr(nv, "NVMLError", Exception)
        try:
            return call()
        except Exception as exc:
            if unsupported and isinstance(exc, unsupported):
                self._unsupported.add((gpu, field))
            elif isinstance(exc, nvml_error):
                self.last_error = f"NVML GPU {gpu} {field}: {exc}"
            else:
                self.last_error = f"NVML GPU {gpu} {field}: {type(exc).__name__}: {exc}"
            return None

    def _shutdown_quietly(self) -> None:
        try:
            self._backend.nvmlShutdown()
        except Exception:
            pass
