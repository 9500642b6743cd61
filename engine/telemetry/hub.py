"""One polling task for every telemetry source: server /metrics, dcgm-exporter, local NVML.

Each tick (``interval_s``) polls the configured sources concurrently. HTTP polls are small
async GETs (parsing only the few metrics redline reads); NVML runs in a worker thread via
``asyncio.to_thread`` because its calls block on driver locks, and a tick never waits on a
slow NVML read for more than one interval (the next tick skips NVML while one is still in
progress). Failures become one-line notices, each reported once; the hub keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import httpx

from .dcgm import DcgmPoller
from .nvml import NvmlSource
from .prom_text import describe_error
from .server_metrics import ServerMetricsPoller
from .types import GpuSample, ServerSample

__all__ = ["TelemetryHub"]

log = logging.getLogger(__name__)

STALE_INTERVALS = 3  # a reading older than this many intervals (and >= STALE_MIN_S) is dropped
STALE_MIN_S = 3.0
MAX_NOTICES = 200

GPU_SOURCE_DCGM = "dcgm"
GPU_SOURCE_NVML = "nvml"
GPU_SOURCE_NONE = "none"


class TelemetryHub:
    """Polls server and GPU telemetry in the background; read its latest state any time.

    ``.server``: the latest ServerSample (None when unconfigured, failing or stale).
    ``.gpus``: the latest per-GPU samples, from dcgm-exporter when ``gpu_metrics_url`` is
    given, else from local NVML when ``use_nvml`` ([] when none/stale).
    ``.gpu_source``: "dcgm" | "nvml" | "none" (decided by ``start``).
    ``.notices``: one-line notices, each reported once (also passed to ``on_notice``).
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        server_metrics_url: str | None,
        gpu_metrics_url: str | None,
        use_nvml: bool = True,
        interval_s: float = 1.0,
        on_notice: Callable[[str], Any] | None = None,
        nvml: NvmlSource | None = None,
        history_s: float = 600.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s!r}")
        self.client = client
        self.interval_s = float(interval_s)
        self.on_notice = on_notice
        self.clock = clock
        timeout = min(5.0, max(1.0, 2.0 * self.interval_s))
        self.server_poller = (
            ServerMetricsPoller(client, server_metrics_url, timeout_s=timeout, clock=clock)
            if server_metrics_url
            else None
        )
        self.dcgm_poller = (
            DcgmPoller(client, gpu_metrics_url, timeout_s=timeout, clock=clock) if gpu_metrics_url else None
        )
        self.nvml: NvmlSource | None = None
        if self.dcgm_poller is None and use_nvml:
            self.nvml = nvml if nvml is not None else NvmlSource()
        self.gpu_source = GPU_SOURCE_NONE
        self.notices: list[str] = []
        self.ticks = 0
        self._server: ServerSample | None = None
        self._gpus: list[GpuSample] = []
        self._gpus_t: float | None = None
        self._history: deque[ServerSample] = deque(maxlen=int(history_s / self.interval_s) + 8)
        self._reported: set[str] = set()
        self._failing: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._nvml_fut: asyncio.Future[list[GpuSample]] | None = None
        self._nvml_open = False
        self._source_decided = False
        self._started = False
        self._callbacks: set[asyncio.Future[Any]] = set()  # running async on_notice calls

    # -- reading ---------------------------------------------------------------------

    @property
    def stale_after_s(self) -> float:
        return max(STALE_MIN_S, STALE_INTERVALS * self.interval_s)

    @property
    def server(self) -> ServerSample | None:
        s = self._server
        if s is None or self.clock() - s.t > self.stale_after_s:
            return None
        return s

    @property
    def gpus(self) -> list[GpuSample]:
        if self._gpus_t is None or self.clock() - self._gpus_t > self.stale_after_s:
            return []
        return list(self._gpus)

    def server_max_running_since(self, t0: float) -> float | None:
        """The most requests the server reported running at or after ``t0`` (None if no
        sample since). Step code uses it to show "server ran at most 8"."""
        values = [s.running for s in self._history if s.t >= t0 and s.running is not None]
        return max(values) if values else None

    def server_max_queued_since(self, t0: float) -> float | None:
        """The longest server queue reported at or after ``t0``."""
        values = [s.queued for s in self._history if s.t >= t0 and s.queued is not None]
        return max(values) if values else None

    # -- lifecycle -------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Open NVML (in a thread) if it is the GPU source, then start polling."""
        if self._started:
            return
        self._started = True
        if not self._source_decided:
            await self._open_gpu_source()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="redline-telemetry")

    async def stop(self) -> None:
        """Cancel polling, wait for it, and close NVML. Safe to call twice."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        fut, self._nvml_fut = self._nvml_fut, None
        if fut is not None and not fut.done():
            await asyncio.wait({fut}, timeout=5.0)  # a sample in progress in its thread
        if self.nvml is not None and self._nvml_open:
            self._nvml_open = False
            await asyncio.to_thread(self.nvml.close)
        self._source_decided = False
        self._started = False

    async def poll_once(self) -> None:
        """One tick now (also usable without ``start``, e.g. in tests or a one-shot read)."""
        if not self._source_decided:
            await self._open_gpu_source()
        await self._tick()

    # -- internals -------------------------------------------------------------------

    async def _open_gpu_source(self) -> None:
        self._source_decided = True
        if self.dcgm_poller is not None:
            self.gpu_source = GPU_SOURCE_DCGM
            return
        if self.nvml is None:
            self.gpu_source = GPU_SOURCE_NONE
            return
        notice = await asyncio.to_thread(self.nvml.open)
        if notice is None:
            self._nvml_open = True
            self.gpu_source = GPU_SOURCE_NVML
        else:
            self.gpu_source = GPU_SOURCE_NONE
            self._notice("nvml", notice)

    async def _run(self) -> None:
        next_t = self.clock()
        while True:
            await self._tick()
            next_t += self.interval_s
            delay = next_t - self.clock()
            if delay < 0:  # a slow tick: skip the missed ones rather than bursting
                next_t = self.clock()
                delay = 0.0
            await asyncio.sleep(delay)

    async def _tick(self) -> None:
        jobs = []
        if self.server_poller is not None:
            jobs.append(self._poll_server())
        if self.dcgm_poller is not None:
            jobs.append(self._poll_dcgm())
        elif self._nvml_open:
            jobs.append(self._sample_nvml())
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                log.warning("telemetry tick failed: %s", describe_error(r))
                self._notice("internal", f"telemetry error: {describe_error(r)}")
        self.ticks += 1

    async def _poll_server(self) -> None:
        poller = self.server_poller
        assert poller is not None
        sample = await poller.poll()
        if sample is None:
            self._notice("server", f"server /metrics unavailable at {poller.last_error}")
            return
        self._notice("server", None)
        self._server = sample
        self._history.append(sample)

    async def _poll_dcgm(self) -> None:
        poller = self.dcgm_poller
        assert poller is not None
        gpus = await poller.poll()
        if gpus is None:
            self._notice("dcgm", f"GPU metrics (dcgm-exporter) unavailable at {poller.last_error}")
            return
        self._notice("dcgm", None)
        self._gpus, self._gpus_t = gpus, poller.last_t

    async def _sample_nvml(self) -> None:
        nvml = self.nvml
        assert nvml is not None
        fut = self._nvml_fut
        if fut is None:
            fut = self._nvml_fut = asyncio.ensure_future(asyncio.to_thread(nvml.sample))
        if not fut.done():
            done, _ = await asyncio.wait({fut}, timeout=self.interval_s)
            if not done:
                return  # still reading: keep the last values; a later tick collects it
        self._nvml_fut = None
        gpus = fut.result()
        if gpus:
            self._gpus, self._gpus_t = gpus, self.clock()

    def _notice(self, source: str, text: str | None) -> None:
        """Report ``text`` once when ``source`` starts failing; None marks it healthy."""
        if text is None:
            self._failing.discard(source)
            return
        if source in self._failing:
            return
        self._failing.add(source)
        if text in self._reported or len(self.notices) >= MAX_NOTICES:
            return
        self._reported.add(text)
        self.notices.append(text)
        if self.on_notice is not None:
            try:
                result = self.on_notice(text)
                if inspect.isawaitable(result):  # an async callback: run it, don't wait
                    task = asyncio.ensure_future(result)
                    self._callbacks.add(task)
                    task.add_done_callback(self._callbacks.discard)
            except Exception as exc:  # a broken callback must not stop telemetry
                log.warning("on_notice callback failed: %s", describe_error(exc))
