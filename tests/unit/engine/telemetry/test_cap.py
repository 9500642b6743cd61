"""Server-cap detection and summed GPU power."""

from __future__ import annotations

from redline.engine.telemetry.cap import CapDetector, cap_cause
from redline.engine.telemetry.efficiency import total_power_w
from redline.engine.telemetry.server_info import ServerInfo
from redline.engine.telemetry.server_metrics import parse_server_metrics
from redline.engine.telemetry.types import GpuSample, ServerSample

from helpers import FIXTURES

PP_INFO = ServerInfo(kind="sglang", max_running_requests=64, pp_size=8, pp_micro_batch_cap=8)


def srv(t: float, running: float, queued: float, kind: str = "sglang", kv: float | None = 0.3) -> ServerSample:
    return ServerSample(t=t, kind=kind, running=running, queued=queued, kv_usage=kv)


def run(det: CapDetector, seq, dt: float = 1.0, t0: float = 0.0):
    """seq: (target, in_flight, running, queued) per tick; server sampled every tick.
    Returns [(t, warning)] for the warnings fired."""
    fired = []
    for i, (target, in_flight, running, queued) in enumerate(seq):
        t = t0 + i * dt
        w = det.update(t, target, in_flight, srv(t, running, queued))
        if w:
            fired.append((t, w))
    return fired


def test_pp_capped_sequence_fires_within_10s_and_names_the_cap():
    det = CapDetector(PP_INFO)
    fired = run(det, [(64, 64, 8, 56)] * 30)
    assert len(fired) == 1  # once per episode
    t, text = fired[0]
    assert t <= 10.0
    assert text == (
        "server cap: client holds 64 in flight, server runs 8 a micro-batch, "
        "queue 56 — micro-batches of 8 from max_running_requests 64 / pp 8: GPUs underfed; raise --max-running-requests (--pp-max-micro-batch-size alone runs no more)"
    )
    assert det.active and det.last_warning == text


def test_fires_with_fast_ticks_and_slower_server_samples():
    det = CapDetector(PP_INFO)
    fired = []
    for i in range(60):  # 4 ticks/s, server scraped once a second
        t = i * 0.25
        s = srv(float(int(t)), 8, 56)
        if det.update(t, 64, 64, s):
            fired.append(t)
    assert len(fired) == 1 and fired[0] <= 10.0


def test_rearms_after_condition_clears():
    det = CapDetector(PP_INFO)
    seq = [(64, 64, 8, 56)] * 8 + [(8, 8, 8, 0)] * 6 + [(64, 64, 8, 56)] * 8
    fired = run(det, seq)
    assert len(fired) == 2
    assert not CapDetector(PP_INFO).active


def test_silent_when_server_runs_everything():
    det = CapDetector(PP_INFO)
    assert run(det, [(64, 64, 64, 0)] * 30) == []
    # running close to in_flight with a small queue (arrivals between steps): still healthy
    assert run(det, [(64, 63, 60, 3)] * 30, t0=100) == []
    # below the server's cap, client not holding its target (e.g. pausing): silent
    assert run(det, [(64, 20, 8, 12)] * 30, t0=200) == []


def test_silent_without_server_sample():
    det = CapDetector(PP_INFO)
    for i in range(30):
        assert det.update(float(i), 64, 64, None) is None
        assert det.update(float(i), 64, 64, ServerSample(t=float(i), kind="sglang")) is None


def test_silent_on_a_repeated_stale_sample():
    det = CapDetector(PP_INFO)
    stale = srv(0.0, 8, 56)
    assert all(det.update(float(i), 64, 64, stale) is None for i in range(30))


def test_silent_during_transient_after_concurrency_change():
    det = CapDetector(PP_INFO)
    seq = [(8, 8, 8, 0)] * 5  # steady at C=8
    seq += [(64, 40, 8, 32), (64, 64, 8, 56), (64, 64, 24, 40)]  # ramp: admitting/prefilling
    seq += [(64, 64, 62, 2)] * 20  # server caught up
    # a target change restarts the clock even when the old condition was building up
    seq += [(96, 96, 40, 56), (96, 96, 40, 56), (128, 128, 60, 68), (128, 128, 60, 68), (128, 128, 128, 0)]
    seq += [(128, 128, 128, 0)] * 10
    assert run(det, seq) == []


def test_cause_texts():
    capped = srv(0.0, 64, 64)
    assert cap_cause(ServerInfo(kind="sglang", max_running_requests=64), capped) == "max_running_requests 64"
    s8 = srv(0.0, 8, 24, kind="vllm", kv=0.002)
    assert cap_cause(ServerInfo(kind="vllm", max_num_seqs=8), s8) == "vLLM max-num-seqs 8"
    assert cap_cause(None, srv(0.0, 8, 56)) == "unknown cause (no server info)"
    assert cap_cause(None, s8) == "likely vLLM --max-num-seqs 8 (vLLM does not report it)"
    kv_full = srv(0.0, 20, 40, kv=0.97)
    assert cap_cause(ServerInfo(kind="sglang", max_running_requests=256), kv_full).startswith("KV cache full (97 %")
    assert cap_cause(ServerInfo(kind="sglang", max_running_requests=256, tp_size=8), srv(0.0, 20, 40)) == (
        "unknown cause (server info: max_running=256 tp=8)"
    )
    dp = ServerInfo(kind="sglang", max_running_requests=32, dp_size=2)
    assert cap_cause(dp, srv(0.0, 64, 10)) == "max_running_requests 32 × dp 2"


def test_real_vllm_capture_fires_with_max_num_seqs():
    text = (FIXTURES / "vllm_metrics_under_load.txt").read_text()
    det = CapDetector(ServerInfo(kind="vllm", max_num_seqs=8))
    fired = []
    for i in range(10):
        s = parse_server_metrics(text, float(i))
        if w := det.update(float(i), 32, 32, s):
            fired.append(w)
    assert fired == ["server cap: client holds 32 in flight, server runs 8, queue 24 — vLLM max-num-seqs 8"]


# -- efficiency ----------------------------------------------------------------------------


def gpus(*powers):
    return [GpuSample(index=i, power_w=p) for i, p in enumerate(powers)]


def test_total_power_sums_the_gpus_that_report_power():
    assert total_power_w(gpus(300.0, 200.0, None)) == 500.0
    assert total_power_w(gpus(None, None)) is None
    assert total_power_w([]) is None


def test_a_micro_batch_as_large_as_the_cap_is_not_the_cause():
    """pp 8 with --pp-max-micro-batch-size 64 and max_running_requests 64: a gauge at 64 meets
    max_running_requests, not a micro-batch that underfeeds the GPUs."""
    mb64 = ServerInfo(kind="sglang", max_running_requests=64, pp_size=8, pp_micro_batch_cap=64)
    assert cap_cause(mb64, srv(0.0, 64, 32)) == "max_running_requests 64"
    assert "GPUs underfed" in cap_cause(PP_INFO, srv(0.0, 8, 0))
    assert not CapDetector.condition(96, 96, srv(0.0, 64, 0), mb64)  # no queue, no micro-batch finding: silent
    assert CapDetector.condition(64, 64, srv(0.0, 8, 0), PP_INFO)  # the seed's: queue 0, gauge at the micro-batch
