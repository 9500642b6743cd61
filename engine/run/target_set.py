"""The session's targets (`--url`, repeated): each its own client, Sender, health watch and
/metrics poller (engine/run/target_stats.py TargetState), the choice of the next one, and what the
engine does when one goes or comes back.

A target that fails (connections refused and /health failing) is skipped and its share goes
to the others; when every target is gone the load is held (no new sends) until one answers.
A target whose /health answers 503 is not ready: skipped the same way (its load held when it
is the only one) until /health answers 200.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import httpx

from ..client.http import make_client
from ..client.server_watch import ServerWatch
from ..client.target import Target, detect, validate_url
from ..load.sender import Sender
from ..telemetry.hub import TelemetryHub
from .target_stats import TargetState, TargetStats
from .wiring import load_events


class TargetSet:
    def __init__(self, engine: Any, ids: itertools.count, on_overload: Callable[[str], None]) -> None:
        self.e = engine
        self.states: list[TargetState] = []  # every target, the first is the engine's `target`
        self.ids = ids  # request ids, unique in the session, in send order (every Sender's)
        self.on_overload = on_overload

    def add(self, client: httpx.AsyncClient, target: Target, weight: float) -> TargetState:
        """One target: its TargetStats, its load Sender (every one shares the request ids and
        the in-flight records, harvested twenty times a second by rid, whichever target they
        went to), its events' subscribers (engine/run/wiring.py) and its health watch."""
        e = self.e
        stats = TargetStats(target.url)
        events = load_events(stats, e.recorder, e.metrics.on_lag, self.on_overload)
        sender = Sender(client, target, events, e.stamp, e.clock.wall0 - e.clock.perf0, ids=self.ids, workload=e.config.workload)
        if self.states:
            first = self.states[0].sender
            sender.in_flight, sender.cursor = first.in_flight, first.cursor
            sender.continuous_usage = first.continuous_usage
        st = TargetState(len(self.states), target, client, sender, stats, weight)
        st.stats.watch = sender.watch = ServerWatch(
            client, target.url + "/health", lambda: self._gone(st), lambda: self._back(st), self.e.log,
            on_not_ready=lambda: self._not_ready(st),
        )
        self.states.append(st)
        return st

    async def start_more(self, url: str, weight: float) -> None:
        """One more target: its own client, detection, Sender, health watch and /metrics."""
        e = self.e
        cfg = e.config
        base = validate_url(url)
        client = make_client(transport=cfg.transport, verify=not cfg.insecure, api_key=cfg.api_key, request_timeout=cfg.request_timeout, origin=base,
                             headers=cfg.workload.headers)
        try:
            target = await detect(client, base, cfg.api or (e.target.api if e.target else None), cfg.model)
        except BaseException:
            await client.aclose()
            raise
        st = self.add(client, target, weight)
        if cfg.telemetry:
            st.telemetry = TelemetryHub(client, server_metrics_url=base + "/metrics", gpu_metrics_url=None, use_nvml=False)
            await st.telemetry.start()
        e.log("notice", f"target {len(self.states)}: {base} ({target.info.kind}, model {target.model or '?'}), weight {weight:g}")

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

    def _gone(self, st: TargetState) -> None:
        e = self.e
        why = st.stats.watch.why if st.stats.watch is not None else ""
        e.events.clear(f"target not ready {st.index}")
        if self.all_down:
            if e.controller is not None:
                e.controller.hold = True
            e.log("error", f"server gone: requests refused or broken and /health fails ({why}); holding load until it answers again")
        elif len(self.states) > 1:
            left = [t.target.url for t in self.states if not t.down]
            e.events.warn(f"target {st.target.url} gone (requests refused or broken, {why}): its share goes to {', '.join(left)}", key=f"target gone {st.index}")

    def _not_ready(self, st: TargetState) -> None:
        e = self.e
        if self.all_down:
            if e.controller is not None:
                e.controller.hold = True
            e.log("error", f"server not ready: requests refused or broken and {st.target.url}/health answers 503; holding load until it answers 200")
        elif len(self.states) > 1:
            left = [t.target.url for t in self.states if not t.down]
            e.events.warn(f"target {st.target.url} not ready (/health answers 503): its share goes to {', '.join(left)}", key=f"target not ready {st.index}")

    def _back(self, st: TargetState) -> None:
        e = self.e
        ctl = e.controller
        e.events.clear(f"target gone {st.index}")
        e.events.clear(f"target not ready {st.index}")
        if ctl is not None and ctl.hold:
            ctl.hold = False
            ctl.poke()
            e.log("notice", f"server back: resuming at C={ctl.target}")
        else:
            e.log("notice", f"target {st.target.url} back: it takes its share again")

    async def close(self, hub: TelemetryHub | None) -> None:
        """Stop every watch and the more targets' telemetry (`hub`: the first's, the engine's)."""
        for st in self.states:
            if st.stats.watch is not None:
                await st.stats.watch.stop()
            if st.telemetry is not None and st.telemetry is not hub:
                await st.telemetry.stop()

    async def close_clients(self) -> None:
        """The more targets' clients (the first is the engine's own)."""
        for st in self.states[1:]:
            await st.client.aclose()
