"""`redline sweep` on a terminal: each configuration in the usual screen, one after another.

For each configuration the app opens at once and a line above its header says where the
sweep is (widgets/sweep_line.py): `sweep 2/3 tp1-pp8-mb8 (tp=1 pp=8 mb=8) · starting: waiting
for http://127.0.0.1:PORT: /health answers 503 (41 s)`, then `running`, then `stopping its
server`. The server starts on the app's start thread (run_app.py StartingHost, `target`): the
screen says what it waits for while the weights load. Every key works on the configuration
running now (`a` probes it, `c` sets C, `k` searches); its preset ending on its own ends the
configuration and the next one opens; `n` ends this one early (its session saved) and goes
on; `q` ends the sweep after saving; Ctrl-C / SIGTERM / SIGHUP end it as a signal ends
`redline` (130 / 143 / 129). Either way the current server's whole process group is stopped
and OUT/sweep.json keeps every configuration finished (engine/sweep/runner.py ConfigServer,
the same records as `redline sweep --headless`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..engine import api
from .exits import EXIT_OK
from .sweep_status import NEXT_REASON, StartAbandoned, SweepStatus

if TYPE_CHECKING:
    from ..engine.api import ConfigServer, EngineConfig, Preset, SweepConfig, SweepSpec
    from .run_app import TargetOf

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_sweep_tui(args: argparse.Namespace, spec: SweepSpec, configs: list[SweepConfig], preset: Preset, out: Path,
                  make_config: Callable[[SweepConfig, Path, float | None, int], EngineConfig], digest: str | None = None,
                  resume: bool = False) -> int:
    """Every configuration in the app, in turn (with --repeats, each repeat an app of its own,
    the server kept up between them unless --restart-each); the exit status (0, or 128 + N for
    a signal). `make_config(config, session, startup_s, repeat)` is the EngineConfig `redline
    run` would use."""
    from .run_app import run_tui

    sf, kept = api.open_sweep_file(spec, out, configs, digest, resume)
    status = SweepStatus(total=len(configs), repeats=spec.repeats)
    lo, hi = preset.duration_bounds()
    clock = api.TimeLeft(len(configs), spec.repeats, (lo + hi) / 2.0, spec.restart_each, spec.cooldown_s)
    caught: list[signal.Signals] = []
    for i, c in enumerate(configs):
        if i in kept:  # --resume: completed before
            status.finished.append(_done_text(sf.entries[i]))
            continue
        status.index, status.label = i, c.label
        status.values = " ".join(f"{k}={v}" for k, v in c.values.items()) if c.command else c.url
        cs = api.ConfigServer(c, out / c.label, spec.ready_timeout_s, on_wait=lambda s: setattr(status, "detail", s),
                              repeats=spec.repeats, gpus=spec.gpus)
        for k in range(1, spec.repeats + 1):
            status.repeat, status.left = k, clock.text(i, k)
            status.phase, status.detail, status.ended_by = "starting", "", ""
            launch = k == 1 or spec.restart_each
            keep = k < spec.repeats and not spec.restart_each  # the server stays up for the next repeat
            if launch:
                cs.launch()  # here, on the main thread (ConfigServer.launch); the app's start thread waits for it
            cfg = make_config(cs.config, cs.begin(k), None, k)  # its port: picked again at launch if taken

            def on_hard_exit(cs: ConfigServer = cs, i: int = i) -> None:
                """SIGHUP: the app leaves with os._exit once its host stopped (the server with it)."""
                sf.set(i, cs.stopped_entry("SIGHUP"))
                sf.end("stopped by SIGHUP")

            t0 = time.monotonic()
            rc = run_tui(cfg, args, preset, target=_server_target(cs, status, wait=launch, keep=keep), sweep=status,
                         on_hard_exit=on_hard_exit)
            ended = rc != 0 or bool(caught) or status.ended_by in ("quit", NEXT_REASON) or (cs.started is not None and not cs.started.ok)
            with _signals_caught(caught):
                if not keep or ended:
                    status.phase, status.detail = "stopping", ""
                    _stop_server(cs)
                sf.set(i, _entry(cs, rc, status.ended_by))
                if cs.started is not None and not cs.started.ok:
                    print(f"redline: sweep {c.label}: failed to start: {cs.started.why}", flush=True)
            if launch and cs.startup_s is not None:
                clock.startups_s.append(cs.startup_s)
            clock.runs_s.append(time.monotonic() - t0)
            if ended:
                break
        status.finished.append(_done_text(sf.entries[i]))
        if rc < 128 and caught:
            rc = 128 + caught[0].value
        if rc >= 128 or status.ended_by == "quit":
            how = f"stopped by {signal.Signals(rc - 128).name}" if rc >= 128 else "ended by q"
            sf.end(how)
            print(f"redline: sweep {how}; every finished configuration is in {out / api.SWEEP_FILE}", flush=True)
            return rc if rc >= 128 else EXIT_OK
        if spec.cooldown_s and i + 1 < len(configs):
            with _signals_caught(caught):
                _sleep_unless(caught, spec.cooldown_s)
            if caught:
                sf.end(f"stopped by {caught[0].name}")
                return 128 + caught[0].value
    sf.end("sweep finished")
    print()
    print(api.format_sweep(api.load_sweep(out) or {}))  # (written above: never None here)
    return EXIT_OK


def _entry(cs: ConfigServer, rc: int, ended_by: str) -> dict:
    """The configuration's sweep.json entry once its app closed."""
    if cs.started is not None and not cs.started.ok:
        return cs.failed_entry()
    if rc >= 128:
        return cs.run_entry(rc)
    if cs.config.command and cs.started is None:  # given up while it started
        return cs.stopped_entry("ended by q while its server started")
    if ended_by == "quit":
        return cs.stopped_entry("ended by q")
    if ended_by == NEXT_REASON:
        return cs.stopped_entry("ended early by n")
    return cs.run_entry(rc)


def _done_text(e: dict) -> str:
    if e.get("status") == "completed":
        knee = e.get("knee_concurrency")
        return f"{e['label']} knee C={knee}" if knee is not None else f"{e['label']} no knee"
    return f"{e['label']} {str(e.get('status', '')).replace('_', ' ')}"


def _server_target(cs: ConfigServer, status: SweepStatus, wait: bool = True, keep: bool = False) -> TargetOf:
    """The app's target (run_app.py StartingHost): the configuration's server, launched and
    waited for on the start thread (`wait`; a repeat on the server kept up: at once); stopped
    when the app's host stops unless `keep` (the next repeat runs on it). `cancel` set (q, a
    signal while it starts) gives the wait up."""

    @contextlib.contextmanager
    def target(cfg: EngineConfig, cancel: threading.Event) -> Iterator[EngineConfig]:
        def on_wait(text: str) -> None:
            if cancel.is_set():
                raise StartAbandoned("the sweep's start was given up")
            status.detail = text

        cs.on_wait = on_wait
        try:
            ok = (asyncio.run(cs.ready()) if wait else True) if not cancel.is_set() else False
        except BaseException:
            _stop_server(cs)
            raise StartAbandoned("the sweep's start was given up") from None
        if not ok:
            _stop_server(cs)
            raise StartAbandoned(f"failed to start: {cs.started.why if cs.started else 'no server'}")
        status.phase = "running"
        status.detail = f"ready in {cs.startup_s:.1f} s" if cs.startup_s is not None else ""
        extra = dict(cfg.meta_extra or {})
        if "sweep" in extra:
            extra["sweep"] = {**extra["sweep"], "startup_s": cs.startup_s}
        try:
            yield dataclasses.replace(cfg, meta_extra=extra)
        finally:  # the app's host stops (the load first): the screen says so while the group ends
            if not keep:
                status.phase, status.detail = "stopping", "its server"
                _stop_server(cs)

    return target


def _stop_server(cs: ConfigServer) -> None:
    """From a thread without an event loop (the main one between apps, the app's host stopping
    on a worker thread)."""
    asyncio.run(cs.stop())


@contextlib.contextmanager
def _signals_caught(caught: list) -> Iterator[None]:
    """Between two configurations (the server stopping, the cooldown) a signal is noted; the
    sweep ends once the step at hand is done."""
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, lambda signum, frame: caught.append(signal.Signals(signum)))
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def _sleep_unless(caught: list, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not caught and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))


__all__ = ["run_sweep_tui"]
