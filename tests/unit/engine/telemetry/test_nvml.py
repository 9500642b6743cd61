"""NVML source: the real library where present, a fake backend with several GPUs."""

from __future__ import annotations

import threading

import pytest

from redline.engine.telemetry.nvml import NVML_ABSENT_PREFIX, NvmlSource

from helpers import FakeNvml


def test_real_nvml_absent_or_present_never_raises():
    src = NvmlSource()
    notice = src.open()
    try:
        if notice is None:  # a machine with a GPU and a driver
            gpus = src.sample()
            assert gpus and all(g.power_w is None or 0 < g.power_w < 2000 for g in gpus)
        else:
            assert notice.startswith(NVML_ABSENT_PREFIX) and notice.endswith(")")
            assert "\n" not in notice
            assert src.sample() == []
    finally:
        src.close()
    src.close()  # twice is fine


@pytest.mark.parametrize(
    "error, reason",
    [
        (FakeNvml.NVMLError_LibraryNotFound(), "NVML Shared Library Not Found"),
        (OSError("libnvidia-ml.so.1: cannot open shared object file"), "libnvidia-ml.so.1"),
    ],
)
def test_open_reports_missing_library_as_notice(error, reason):
    src = NvmlSource(FakeNvml(init_error=error))
    notice = src.open()
    assert notice is not None and notice.startswith("no local GPU telemetry (NVML: ")
    assert reason in notice
    assert src.sample() == []
    assert not src.is_open


def test_open_with_no_gpus():
    fake = FakeNvml(n=0)
    notice = NvmlSource(fake).open()
    assert notice == "no local GPU telemetry (NVML: no GPUs found)"
    assert fake.shutdowns == 1


def test_fake_four_gpus_units_and_not_supported():
    fake = FakeNvml(n=4)
    src = NvmlSource(fake)
    assert src.open() is None
    assert src.gpu_count == 4
    gpus = src.sample()
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    g0, g1, g2, g3 = gpus
    assert g0.name == g1.name == "NVIDIA H100 PCIe"  # bytes decoded
    assert g0.power_w == pytest.approx(300.0)  # mW -> W
    assert g3.power_w == pytest.approx(303.0)
    assert g0.power_limit_w == pytest.approx(350.0)
    assert g0.power_pct == pytest.approx(100 * 300 / 350)
    assert g1.util_pct == 41.0
    assert g1.mem_used_mib == pytest.approx(1001.0)  # bytes -> MiB
    assert g1.mem_total_mib == pytest.approx(81559.0)
    assert g0.temp_c == 50.0
    assert g0.energy_j == pytest.approx(123456.789)  # mJ -> J
    assert g2.energy_j is None  # NotSupported
    assert g3.temp_c is None  # NotSupported
    assert src.last_error is None
    # unsupported fields are not asked again
    calls = dict(fake.calls)
    src.sample()
    assert fake.calls["energy"] - calls["energy"] == 3
    assert fake.calls["temp"] - calls["temp"] == 3
    assert fake.calls["power"] - calls["power"] == 4
    src.close()
    assert fake.shutdowns == 1
    assert src.sample() == []


def test_other_nvml_error_becomes_none_and_is_remembered():
    fake = FakeNvml(n=2)

    def lost(h: int) -> int:
        raise fake.NVMLError("GPU is lost")

    fake.nvmlDeviceGetPowerUsage = lost  # type: ignore[method-assign]
    src = NvmlSource(fake)
    assert src.open() is None
    gpus = src.sample()
    assert all(g.power_w is None for g in gpus)
    assert src.last_error is not None and "GPU is lost" in src.last_error


def test_temperature_falls_back_to_v_function_when_old_one_is_gone():
    fake = FakeNvml(n=1)

    class FunctionNotFound(fake.NVMLError):
        pass

    def gone(h: int, sensor: int) -> int:
        raise FunctionNotFound("Function Not Found")

    fake.NVMLError_FunctionNotFound = FunctionNotFound  # type: ignore[attr-defined]
    fake.nvmlDeviceGetTemperature = gone  # type: ignore[method-assign]
    fake.nvmlDeviceGetTemperatureV = lambda h, sensor: 47  # type: ignore[attr-defined]
    src = NvmlSource(fake)
    assert src.open() is None
    assert src.sample()[0].temp_c == 47.0
    del fake.nvmlDeviceGetTemperatureV
    def no_energy(h: int) -> int:
        raise FunctionNotFound("Function Not Found")

    fake.nvmlDeviceGetTotalEnergyConsumption = no_energy  # type: ignore[method-assign]
    gpus = src.sample()
    assert gpus[0].temp_c is None and gpus[0].energy_j is None  # remembered as unsupported
    assert (0, "temp") in src._unsupported and (0, "energy") in src._unsupported


def test_close_waits_for_sample_in_another_thread():
    fake = FakeNvml(n=2)
    gate, entered = threading.Event(), threading.Event()
    orig = fake.nvmlDeviceGetPowerUsage

    def slow(h: int) -> int:
        entered.set()
        gate.wait(2)
        return orig(h)

    fake.nvmlDeviceGetPowerUsage = slow  # type: ignore[method-assign]
    src = NvmlSource(fake)
    assert src.open() is None
    result: list = []
    t = threading.Thread(target=lambda: result.append(src.sample()))
    t.start()
    assert entered.wait(2)
    closer = threading.Thread(target=src.close)
    closer.start()
    closer.join(0.1)
    assert closer.is_alive()  # close waits for the sample in progress
    gate.set()
    t.join(2)
    closer.join(2)
    assert len(result[0]) == 2 and fake.shutdowns == 1
