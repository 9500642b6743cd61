"""Workers as Ray actors across a cluster (`--ray auto|ADDRESS --workers N`; the optional
extra `redline[ray]`, Ray >= 2).

The coordinator (the operator's engine, its TUI, the session log) stays where it runs; the
load's workers (engine/load/worker.py, the same Worker as a local process) are Ray actors placed
by a placement group spread over the cluster's nodes, each with one CPU. Each connects to
the targets itself, from its node.

What crosses the network: orders (shares, the stamp, pause), and every FLUSH_S each
worker's report: token counts and ITL values in 10 ms buckets, one summary per ended
request. Never a chunk's timestamp. Clocks of different hosts are never subtracted from each
other: a report carries its host's clock at the moment it was taken (`now`); the coordinator
keeps one offset per worker, the smallest (receipt time - now) seen so far (the report that
travelled fastest), and moves every time of every report of that worker by it, so a
request's send, first token and end, told in different reports, keep their distances. On
the coordinator's own host the clock is shared and used as it is. A worker (or node) that dies is
reported, and its share goes to the others.
"""

from __future__ import annotations

import asyncio
import platform
import socket
import time
from typing import TYPE_CHECKING, TypeVar

from ..client.target import TargetUnreachable
from ..loop import wait_within
from .worker import FLUSH_S, WorkerSpec
from .worker_pool import STOP_TIMEOUT_S, SYNC_TIMEOUT_S, WorkerPool, _with_index

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.util.placement_group import PlacementGroup
    from typing_extensions import Unpack  # typing's own from Python 3.11

    from .controller import LoadOptions
    from .port import LoadPort
    from .worker_messages import Ask, Feed, Order, Report

T = TypeVar("T")
READY_TIMEOUT_S = 120.0
HEAD_CHECK_S = 3.0


class RayUnavailable(TargetUnreachable):
    """Ray is not installed or the cluster cannot be reached (one line)."""


def _actor_class():
    import ray

    @ray.remote(num_cpus=1)
    class RayWorker:
        """One worker on a Ray node: the Worker of engine/load/worker.py on the actor's loop."""

        async def start(self, spec: WorkerSpec) -> str:
            from .worker import Worker

            self.w = Worker(spec, None)
            await self.w.warm()
            self.w.start()
            return platform.node()

        async def order(self, msg: Order | Feed) -> None:
            self.w.apply(msg)

        async def take(self, kind: str = "batch", cut: tuple[float, float, bool] | None = None) -> Report:
            return self.w.take(kind, cut=cut)

        async def abort(self) -> tuple[int, Report]:
            n = await self.w.ctl.abort()
            return n, self.w.take("abort")

        async def stop(self) -> tuple[int, Report]:
            n = await self.w.close()
            return n, self.w.take("stopped")

    return RayWorker


def connect(address: str) -> None:
    """Join the Ray cluster at `address` (`auto`: the one this host belongs to)."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray: Ray is not installed here; pip install 'redline[ray]' (on every node)") from None
    if ray.is_initialized():
        return
    if address != "auto":  # Ray retries an unreachable head for minutes: ask its port first
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host or address, int(port) if port.isdigit() else 6379), timeout=HEAD_CHECK_S).close()
        except (OSError, ValueError) as exc:
            raise RayUnavailable(f"--ray {address!r}: no Ray head answers there ({getattr(exc, 'strerror', None) or exc}); expected auto or HOST:PORT of the head (ray start --head prints it)") from None
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, configure_logging=False)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError: Ray's own
        raise RayUnavailable(f"--ray {address!r}: cannot join the Ray cluster ({' '.join(str(exc).split())[:200]})") from None


class RayPool(WorkerPool):
    def __init__(self, port: LoadPort, workers: int, concurrency: int, max_concurrency: int, address: str,
                 **kw: Unpack[LoadOptions]) -> None:
        super().__init__(port, workers, concurrency, max_concurrency, **kw)
        self.address = address
        self._actors: list = []
        self._pg: PlacementGroup | None = None
        self._poller: asyncio.Task | None = None
        self._here = platform.node()
        self._offsets: dict[int, float] = {}  # worker -> its clock's offset (smallest receipt - now)
        # one pull at a time: a report applied before an earlier one would end requests whose
        # sends are not in yet (pulls of the poller, of a step's sync, of abort and stop)
        self._pulling = asyncio.Lock()

    async def launch(self, spec: WorkerSpec) -> None:
        await asyncio.to_thread(connect, self.address)
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._pg = pg = placement_group([{"CPU": 1}] * self.n, strategy="SPREAD")
        try:
            await wait_within(pg.ready(), READY_TIMEOUT_S)
        except TimeoutError:
            raise RayUnavailable(f"--workers {self.n}: the Ray cluster did not grant {self.n} CPUs within {READY_TIMEOUT_S:.0f} s") from None
        cls = _actor_class()
        self._actors = [
            cls.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
            for i in range(self.n)
        ]
        nodes = await wait_within(asyncio.gather(*(a.start.remote(_with_index(spec, i)) for i, a in enumerate(self._actors))), READY_TIMEOUT_S)
        for st, node in zip(self.states, nodes, strict=False):
            st.node = node
        self._conns = self._actors  # the base class counts workers by their channels

    def start(self) -> None:
        super().start()
        self._poller = asyncio.create_task(self._poll(), name="redline-ray-reports")

    # -- channels -----------------------------------------------------------------------
    def _send(self, i: int, msg: Order | Feed | Ask) -> bool:
        self._actors[i].order.remote(msg)  # an actor runs one caller's calls in order
        return True

    def _worker_time(self, i: int, t: float) -> float:
        """A time of this host on worker i's clock: its reports' offset taken back."""
        return t - self._offsets.get(i, 0.0)

    def _place(self, i: int, msg: Report, t_recv: float) -> None:
        shift = 0.0
        if self.states[i].node != self._here:
            seen = t_recv - msg.now
            shift = self._offsets[i] = min(seen, self._offsets.get(i, seen))
        self._apply(i, msg, shift)

    async def _call(self, i: int, ref: ObjectRef[T]) -> T | None:
        try:
            return await ref
        except Exception:  # RayActorError, a node lost: the worker is gone
            self._worker_died(i)
            return None

    async def _poll(self) -> None:
        nxt = time.perf_counter()
        while not self.stopped:
            nxt += FLUSH_S
            await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
            await self._take_all("batch")

    def _alive(self) -> list[int]:
        """The workers alive with an actor (none before launch made them, or when it failed)."""
        return [s.index for s in self.states if s.alive and s.index < len(self._actors)]

    async def _take_all(self, kind: str, cut: tuple[float, bool] | None = None) -> None:
        async with self._pulling:
            alive = self._alive()
            msgs = await asyncio.gather(*(self._call(i, self._actors[i].take.remote(kind, self._cut_for(i, cut))) for i in alive))
            t = time.perf_counter()
            for i, msg in zip(alive, msgs, strict=False):
                if msg is not None:
                    self._place(i, msg, t)

    # -- the LoadControl surface ------------------------------------------------------------
    async def sync(self, cut: tuple[float, bool] | None = None) -> None:
        if self.stopped:
            return
        try:
            await wait_within(asyncio.shield(self._take_all("flush", cut)), SYNC_TIMEOUT_S)  # late: still applied
        except TimeoutError:
            self.port.warn(f"workers: a report took over {SYNC_TIMEOUT_S:g} s; the step may miss its last moments", key="worker sync")

    async def abort(self) -> int:
        self._push_orders()
        return await self._finish_all("abort", SYNC_TIMEOUT_S * 2)

    async def _finish_all(self, method: str, timeout: float) -> int:
        async with self._pulling:
            alive = self._alive()
            if not alive:
                return 0
            calls = asyncio.gather(*(self._call(i, getattr(self._actors[i], method).remote()) for i in alive))
            try:
                res = await wait_within(asyncio.shield(calls), timeout)
            except TimeoutError:
                self.port.warn(f"workers: {method} took over {timeout:g} s; their last reports may be missing", key="worker sync")
                return 0
            t = time.perf_counter()
            n = 0
            for i, r in zip(alive, res, strict=False):
                if r is not None:
                    n += r[0]
                    self._place(i, r[1], t)
            return n

    async def stop(self) -> int:
        self.stopped = True
        self._wake.set()
        if self._poller is not None:  # let a report being pulled arrive: cancelling would lose it
            await asyncio.wait([self._poller], timeout=SYNC_TIMEOUT_S * 2)
            self._poller.cancel()
        n = await self._finish_all("stop", STOP_TIMEOUT_S)
        try:
            import ray
        except ImportError:  # never launched: nothing joined, nothing to leave
            return n
        for a in self._actors:
            try:
                ray.kill(a)
            except Exception:  # already gone
                pass
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._pg)
            except Exception:
                pass
        if self._runner is not None:
            await asyncio.wait([self._runner], timeout=1.0)
        if ray.is_initialized():
            await asyncio.to_thread(ray.shutdown)  # leave the cluster (it keeps running for others)
        return n
