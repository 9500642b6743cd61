"""A fake NVML library (the pynvml functions NvmlSource uses)."""

from __future__ import annotations

from types import SimpleNamespace


# -- a fake NVML library ----------------------------------------------------------------------
class FakeNvml:
    """Implements the pynvml functions NvmlSource uses, for ``n`` GPUs."""

    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        def __str__(self) -> str:
            return "Not Supported"

    class NVMLError_LibraryNotFound(NVMLError):
        def __str__(self) -> str:
            return "NVML Shared Library Not Found"

    def __init__(self, n: int = 4, *, init_error: Exception | None = None) -> None:
        self.n = n
        self.init_error = init_error
        self.inited = 0
        self.shutdowns = 0
        self.calls: dict[str, int] = {}
        self.unsupported = {(2, "energy"), (3, "temp")}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.inited += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes | str:
        return b"NVIDIA H100 PCIe" if h % 2 else "NVIDIA H100 PCIe"

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._count("power")
        return 300_000 + 1000 * h  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 350_000  # mW

    def nvmlDeviceGetUtilizationRates(self, h: int):
        return SimpleNamespace(gpu=40 + h, memory=20)

    def nvmlDeviceGetMemoryInfo(self, h: int):
        return SimpleNamespace(used=(1000 + h) * 1024 * 1024, total=81559 * 1024 * 1024, free=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        self._count("temp")
        if (h, "temp") in self.unsupported:
            raise self.NVMLError_NotSupported()
        return 50 + h

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._count("energy")
        if (h, "energy") in self.unsupported:
            raise self.NVMLError_NotSupported()
        return 123_456_789 + h  # mJ
