"""The session's targets (`--url`, repeated): each its own client, Sender, health watch and
/metrics poller (engine/core/target_stats.py TargetState), the choice of the next one, what the
engine does when one goes or comes back, and the first target's profiler and cache endpoints
(engine/client/server_admin.py ServerOps, made on first use).

A target that fails (connections refused and /health failing) is skipped and its share goes
to the others; when every target is gone the load is held (no new sends) until one answers.
A target whose /health answers 503 is not ready: skipped the same way (its load held when it
is the only one) until /health answers 200.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Iterator

import httpx

from ..client.http import make_client
from ..client.server_admin import FLUSH_PATHS, ServerOps
from ..client.server_watch import ServerWatch
from ..client.target import Target, detect, validate_url
from ..constants import OVERLOAD_BACKOFF_MAX_S
from ..load.sender import Sender, Stamp
from ..load.worker_count import kernel_stamped
from ..telemetry.hub import TelemetryHub
from .target_stats import TargetState, TargetStats
from .wiring import load_hooks

if TYPE_CHECKING:
    from ..measure.live_metrics import LiveMetrics
    from ..measure.records import Clock
    from .config import EngineConfig
    from .event_log import EventLog
    from .held_load import HeldLoad
    from .measurements import Measurements


class TargetSet:
    """Every target, the first first (`target`, `client`: the engine's own); iterable, sized and
    indexed as the list of their TargetStates."""

    def __init__(self, config: EngineConfig, clock: Clock, events: EventLog, measurements: Measurements, metrics: LiveMetrics,
                 load: HeldLoad, stamp: Stamp) -> None:
        self.config = config
        self.clock = clock
        self.events = events
        self.measurements = measurements
        self.metrics = metrics
        self.load = load
        self.stamp = stamp
        self.states: list[TargetState] = []
        self.ids = itertools.count(1)  # request ids, unique in the session, in send order (every Sender's)
        self.client: httpx.AsyncClient | None = None  # the first target's, made before it is detected
        self.target: Target | None = None  # the first target, once detected
        self._ops: ServerOps | None = None

    # -- a list of TargetStates -------------------------------------------------------------
    def __iter__(self) -> Iterator[TargetState]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, i: int) -> TargetState:
        return self.states[i]

    # -- the start ---------------------------------------------------------------------------
    def open(self, base: str) -> httpx.AsyncClient:
        """The first target's client (closed by close_clients, even when its start fails)."""
        cfg = self.config
        self.client = make_client(
            transport=cfg.transport, verify=not cfg.insecure, api_key=cfg.api_key, request_timeout=cfg.request_timeout,
            origin=base, headers=cfg.workload.headers,
        )
        return self.client

    async def detect_first(self, base: str) -> Target:
        """What the first target is (TargetUnreachable when it does not answer)."""
        assert self.client is not None
        self.target = await detect(self.client, base, self.config.api, self.config.model)
        return self.target

    def add(self, client: httpx.AsyncClient, target: Target, weight: float) -> TargetState:
        """One target: its TargetStats, its load Sender (every one shares the request ids and
        the in-flight records, harvested twenty times a second by rid, whichever target they
        went to), its hooks' subscribers (engine/core/wiring.py) and its health watch."""
        stats = TargetStats(target.url)
        hooks = load_hooks(stats, self.measurements, self.metrics.on_lag, self.overloaded)
        sender = Sender(client, target, hooks, self.stamp, self.clock.wall0 - self.clock.perf0, ids=self.ids,
                        workload=self.config.workload)
        if self.states:
            first = self.states[0].sender
            sender.in_flight, sender.cursor = first.in_flight, first.cursor
            sender.continuous_usage = first.continuous_usage
        st = TargetState(len(self.states), target, client, sender, stats, weight)
        st.stats.watch = sender.watch = ServerWatch(
            client, target.url + "/health", lambda: self._gone(st), lambda: self._back(st), self.events.log,
            on_not_ready=lambda: self._not_ready(st),
        )
        self.states.append(st)
        return st

    async def start_more(self, url: str, weight: float) -> None:
        """One more target: its own client, detection, Sender, health watch and /metrics."""
        cfg = self.config
        base = validate_url(url)
        client = make_client(transport=cfg.transport, verify=not cfg.insecure, api_key=cfg.api_key, request_timeout=cfg.request_timeout, origin=base,
                             headers=cfg.workload.headers)
        try:
            target = await detect(client, base, cfg.api or (self.target.api if self.target else None), cfg.model)
        except BaseException:
            await client.aclose()
            raise
        st = self.add(client, target, weight)
        if cfg.telemetry:
            st.telemetry = TelemetryHub(client, server_metrics_url=base + "/metrics", gpu_metrics_url=None, use_nvml=False)
            await st.telemetry.start()
        self.events.log("notice", f"target {len(self.states)}: {base} ({target.info.kind}, model {target.model or '?'}), weight {weight:g}")

    @property
    def sender(self) -> Sender:
        """The first target's load Sender (start-up's own requests go through it)."""
        return self.states[0].sender

    # -- the profiler and the cache (engine/run/server_ops.py) -------------------------------
    def server_ops(self) -> ServerOps:
        """The first target's ServerOps, made on first use: its kind by what the server said,
        else by what its /metrics say it is."""
        if self._ops is None:
            assert self.client is not None and self.target is not None, "engine not started"
            kind = self.target.info.kind
            hub = self.states[0].telemetry if self.states else None
            srv = hub.server if hub is not None else None
            if kind not in FLUSH_PATHS and srv is not None:
                kind = srv.kind
            self._ops = ServerOps(
                self.client, self.target.url, kind, self.events.log, lambda text: self.events.warn(text, key=f"server ops {text[:40]}"),
                output_dir=None, admin_key=self.config.admin_key, info_raw=self.target.info.raw,  # output_dir: the server's default
            )
        return self._ops

    @property
    def trace_being_written(self) -> bool:
        """A /stop_profile awaits its answer: SGLang's scheduler is writing the trace and makes
        no token meanwhile (a silence of redline's own making, not a stall)."""
        ops = self._ops
        return ops is not None and ops.capture is not None and ops.capture.t_end is not None

    def kernel_stamped(self) -> bool:
        """Whether every read of the load on these targets carries the kernel's receive time
        (engine/load/worker_count.py: what `--workers auto` sizes by, what client_limited judges)."""
        return kernel_stamped((t.target.url for t in self), self.config.transport)

    # -- gone and back -------------------------------------------------------------------------
    @property
    def all_gone(self) -> bool:
        return bool(self.states) and all(t.gone for t in self.states)

    @property
    def all_down(self) -> bool:
        """Every target gone or not ready (its /health answers 503): the load is held."""
        return bool(self.states) and all(t.down for t in self.states)

    @property
    def backing_off(self) -> int:
        return sum(t.sender.backing_off for t in self.states)

    def overloaded(self, kind: str) -> None:
        """A load slot was answered 429/503/shed (its Sender's `overloaded`): warned, once an episode."""
        self.events.warn(f"server overloaded ({kind}): each failing slot backs off up to {OVERLOAD_BACKOFF_MAX_S:g} s", key="overloaded")

    def _gone(self, st: TargetState) -> None:
        why = st.stats.watch.why if st.stats.watch is not None else ""
        self.events.clear(f"target not ready {st.index}")
        self._down(st, f"server gone: requests refused or broken and /health fails ({why}); holding load until it answers again",
                   f"target {st.target.url} gone (requests refused or broken, {why})", f"target gone {st.index}")

    def _not_ready(self, st: TargetState) -> None:
        self._down(st, f"server not ready: requests refused or broken and {st.target.url}/health answers 503; holding load until it answers 200",
                   f"target {st.target.url} not ready (/health answers 503)", f"target not ready {st.index}")

    def _down(self, st: TargetState, all_down: str, this_one: str, key: str) -> None:
        """A target down: with every target down the load holds (an error line); else its share
        goes to the others (a warning naming them)."""
        if self.all_down:
            if self.load.controller is not None:
                self.load.controller.hold = True
            self.events.log("error", all_down)
        elif len(self.states) > 1:
            left = [t.target.url for t in self.states if not t.down]
            self.events.warn(f"{this_one}: its share goes to {', '.join(left)}", key=key)

    def _back(self, st: TargetState) -> None:
        ev = self.events
        ctl = self.load.controller
        ev.clear(f"target gone {st.index}")
        ev.clear(f"target not ready {st.index}")
        if ctl is not None and ctl.hold:
            ctl.hold = False
            ctl.poke()
            ev.log("notice", f"server back: resuming at C={ctl.concurrency}")
        else:
            ev.log("notice", f"target {st.target.url} back: it takes its share again")

    # -- the stop ------------------------------------------------------------------------------
    async def close(self, hub: TelemetryHub | None) -> None:
        """Stop every watch and the more targets' telemetry (`hub`: the first's, the engine's)."""
        for st in self.states:
            if st.stats.watch is not None:
                await st.stats.watch.stop()
            if st.telemetry is not None and st.telemetry is not hub:
                await st.telemetry.stop()

    async def close_clients(self) -> None:
        """Every target's client, the first (the engine's own) first."""
        if self.client is not None:
            await self.client.aclose()
        for st in self.states[1:]:
            await st.client.aclose()
