"""Pollers and the telemetry hub against real loopback HTTP servers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from redline.engine.telemetry.dcgm import DcgmPoller
from redline.engine.telemetry.hub import TelemetryHub
from redline.engine.telemetry.nvml import NvmlSource
from redline.engine.telemetry.server_metrics import ServerMetricsPoller

from helpers import FIXTURES, FakeNvml, free_port, until

SGLANG = (FIXTURES / "sglang_metrics.txt").read_text()
VLLM = (FIXTURES / "vllm_metrics_under_load.txt").read_text()
DCGM = (FIXTURES / "dcgm_metrics.txt").read_text()


@contextlib.asynccontextmanager
async def serve(routes: dict[str, str]) -> AsyncIterator[str]:
    """A tiny aiohttp server on 127.0.0.1, port 0, serving fixed texts; yields its base URL."""
    app = web.Application()
    for path, body in routes.items():
        async def handler(request: web.Request, body: str = body) -> web.Response:
            return web.Response(text=body, content_type="text/plain")

        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


# -- pollers -------------------------------------------------------------------------------


async def test_server_poller_derives_vllm_throughput_from_counter():
    count = [7393.0]
    now = [10.0]

    def handler(request: httpx.Request) -> httpx.Response:
        body = VLLM.replace(
            'vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 7393.0',
            f'vllm:generation_tokens_total{{engine="0",model_name="tiny-llama"}} {count[0]}',
        )
        return httpx.Response(200, text=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        poller = ServerMetricsPoller(client, "http://sim/metrics", clock=lambda: now[0])
        first = await poller.poll()
        assert first is not None and first.gen_throughput is None and first.running == 8
        count[0] += 500.0
        now[0] += 2.0
        second = await poller.poll()
        assert second is not None and second.gen_throughput == pytest.approx(250.0)
        assert poller.last_error is None and poller.last is second


@pytest.mark.parametrize(
    "response, expect",
    [
        (httpx.Response(404, text="Not Found"), "HTTP 404"),
        (httpx.Response(200, text="<html>oops</html>"), "not Prometheus text"),
        (httpx.Response(200, text="# nothing here\n"), "no SGLang or vLLM metrics"),
        (httpx.ConnectError("All connection attempts failed"), "ConnectError: All connection attempts failed"),
        (httpx.ReadTimeout("timed out"), "ReadTimeout"),
    ],
)
async def test_server_poller_errors_become_last_error(response, expect):
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(response, Exception):
            raise response
        return response

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        poller = ServerMetricsPoller(client, "http://h:1/metrics")
        assert await poller.poll() is None
        assert poller.last_error is not None and poller.last_error.startswith("http://h:1/metrics: ")
        assert expect in poller.last_error and "\n" not in poller.last_error


async def test_dcgm_poller_ok_and_errors():
    bodies = iter([DCGM, "garbage garbage\n", SGLANG])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=next(bodies))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        poller = DcgmPoller(client, "http://gpu:9400/metrics")
        gpus = await poller.poll()
        assert gpus is not None and len(gpus) == 4 and poller.last_error is None
        assert await poller.poll() is None and "not Prometheus text" in (poller.last_error or "")
        assert await poller.poll() is None and "no DCGM_FI_DEV_*" in (poller.last_error or "")
        assert poller.last == gpus  # last good reading kept


# -- hub -----------------------------------------------------------------------------------


@pytest.mark.server
async def test_hub_fills_server_and_gpus_from_http_and_stops_cleanly():
    notices: list[str] = []
    async with serve({"/metrics": SGLANG, "/dcgm": DCGM}) as base:
        async with httpx.AsyncClient() as client:
            hub = TelemetryHub(
                client,
                server_metrics_url=f"{base}/metrics",
                gpu_metrics_url=f"{base}/dcgm",
                interval_s=0.05,
                on_notice=notices.append,
            )
            t0 = time.perf_counter()
            await hub.start()
            assert hub.running and hub.gpu_source == "dcgm"
            assert await until(lambda: hub.server is not None and len(hub.gpus) == 4 and hub.ticks >= 3, 5.0)
            server = hub.server
            assert server is not None and server.kind == "sglang"
            assert (server.running, server.queued) == (58.0, 7.0)
            assert [g.index for g in hub.gpus] == [0, 1, 2, 3]
            assert hub.gpus[0].power_w == pytest.approx(212.503) and hub.gpus[3].power_w is None
            assert hub.server_max_running_since(t0) == 58.0
            assert hub.server_max_queued_since(t0) == 7.0
            assert hub.server_max_running_since(time.perf_counter() + 10) is None
            assert hub.notices == [] and notices == []
            await hub.stop()
            assert not hub.running
            ticks = hub.ticks
            await asyncio.sleep(0.15)
            assert hub.ticks == ticks  # really stopped
            await hub.stop()  # idempotent
    current = asyncio.current_task()
    assert [t for t in asyncio.all_tasks() if t is not current and "telemetry" in t.get_name()] == []


async def test_hub_reports_unreachable_server_once_and_keeps_running():
    notices: list[str] = []
    url = f"http://127.0.0.1:{free_port()}/metrics"
    async with httpx.AsyncClient() as client:
        hub = TelemetryHub(
            client,
            server_metrics_url=url,
            gpu_metrics_url=None,
            use_nvml=False,
            interval_s=0.02,
            on_notice=notices.append,
        )
        await hub.start()
        assert await until(lambda: hub.ticks >= 5, 5.0)
        await hub.stop()
    assert hub.server is None and hub.gpus == [] and hub.gpu_source == "none"
    assert len(notices) == 1 and hub.notices == notices
    assert notices[0].startswith(f"server /metrics unavailable at {url}: ConnectError")


@pytest.mark.server
async def test_hub_with_nvml_backend_samples_off_the_loop():
    fake = FakeNvml(n=4)
    async with serve({"/metrics": VLLM}) as base:
        async with httpx.AsyncClient() as client:
            hub = TelemetryHub(
                client,
                server_metrics_url=f"{base}/metrics",
                gpu_metrics_url=None,
                nvml=NvmlSource(fake),
                interval_s=0.05,
            )
            await hub.start()
            assert hub.gpu_source == "nvml"
            assert await until(lambda: len(hub.gpus) == 4 and hub.server is not None, 5.0)
            assert hub.gpus[0].power_w == pytest.approx(300.0)
            assert hub.server is not None and (hub.server.running, hub.server.queued) == (8.0, 24.0)
            await hub.stop()
    assert fake.shutdowns == 1 and hub.notices == []


async def test_hub_without_nvml_library_gives_notice():
    notices: list[str] = []
    fake = FakeNvml(init_error=FakeNvml.NVMLError_LibraryNotFound())
    async with httpx.AsyncClient() as client:
        hub = TelemetryHub(
            client,
            server_metrics_url=None,
            gpu_metrics_url=None,
            nvml=NvmlSource(fake),
            interval_s=0.05,
            on_notice=notices.append,
        )
        await hub.start()
        await hub.poll_once()
        await hub.stop()
    assert notices == ["no local GPU telemetry (NVML: NVML Shared Library Not Found)"]
    assert hub.gpu_source == "none" and hub.gpus == []


async def test_hub_real_nvml_on_this_machine_never_raises():
    async with httpx.AsyncClient() as client:
        hub = TelemetryHub(client, server_metrics_url=None, gpu_metrics_url=None, interval_s=0.05)
        await hub.start()
        await hub.poll_once()
        await hub.stop()
    if hub.gpu_source == "none":
        assert len(hub.notices) == 1 and hub.notices[0].startswith("no local GPU telemetry (NVML: ")
    else:
        assert hub.gpu_source == "nvml" and hub.notices == []


def test_hub_rejects_bad_interval():
    with pytest.raises(ValueError, match="interval_s"):
        TelemetryHub(None, server_metrics_url=None, gpu_metrics_url=None, interval_s=0)  # type: ignore[arg-type]


async def test_hub_async_notice_callback_and_poll_once_without_start():
    got: list[str] = []

    async def on_notice(text: str) -> None:
        got.append(text)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="starting")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        hub = TelemetryHub(
            client, server_metrics_url="http://h/metrics", gpu_metrics_url=None, use_nvml=False, on_notice=on_notice
        )
        await hub.poll_once()
        await hub.poll_once()
        await asyncio.sleep(0)
        await hub.stop()
    assert got == ["server /metrics unavailable at http://h/metrics: HTTP 503"]
