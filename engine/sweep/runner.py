"""Running a sweep: for each configuration in turn, launch its server (its own process group,
its output in `OUT/<label>/server.log`), wait until it is ready (its startup time is a
figure), run the preset against it exactly as `redline run` does (`run_one`, the caller's:
the headless runner) into `OUT/<label>/` (with `--repeats N`, N times, into
`OUT/<label>/r1` ... `rN`, the server kept up between them unless `--restart-each`), stop its
whole group and confirm its port is free, then the next. `OUT/sweep.json` is rewritten after
each repeat (engine/sweep/sweep_file.py).

A configuration whose server exits or never gets ready is `failed_to_start` (why, and the last
lines of its log) and the sweep goes on. A cancel (a signal: the caller cancels the task)
stops the current server's group, keeps every finished configuration and writes the file.
`--resume` skips the configurations a stopped sweep completed (engine/sweep/resume.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from .resume import resume_sweep_file, sweep_head
from .server_proc import ServerProcess, Started, free_port, port_free, wait_port_free
from .spec import Config, SweepSpec
from .sweep_file import COMPLETED, FAILED_TO_START, RUNNING, STOPPED, SweepFile, entry, loss_why

SERVER_LOG = "server.log"

# run_one(config, session dir, startup_s, repeat k from 1) -> the exit status of `redline run --headless`
RunOne = Callable[[Config, Path, "float | None", int], Awaitable[int]]


@dataclass
class SweepOutcome:
    file: SweepFile
    status: int = 0  # 0, or the signal's 128 + N when one stopped it


def open_sweep_file(spec: SweepSpec, out: Path, configs: list[Config], digest: str | None = None,
                    resume: bool = False) -> tuple[SweepFile, set[int]]:
    """OUT/sweep.json with every configuration `not_run`, written at once, and no configuration
    kept; with `resume`, the recorded one's completed configurations kept (their indexes):
    SweepError when there is none or it differs."""
    head = sweep_head(spec, configs, digest)
    if resume:
        return resume_sweep_file(out, head, configs)
    sf = SweepFile(out, head, configs)
    sf.write()
    return sf, set()


@dataclass
class TimeLeft:
    """The sweep's time left: the runs to come at the mean length of those done (before any,
    the preset's estimate), and as many startups as servers to launch at the mean startup."""

    configs: int
    repeats: int
    estimate_s: float  # one run of the preset, if no rule fires
    restart_each: bool = False
    cooldown_s: float = 0.0
    runs_s: list[float] = field(default_factory=list)
    startups_s: list[float] = field(default_factory=list)

    def left_s(self, config: int, repeat: int) -> float:
        """Before repeat `repeat` (from 1) of configuration `config` (from 0), this one included."""
        runs = (self.configs - config - 1) * self.repeats + (self.repeats - repeat + 1)
        per_run = sum(self.runs_s) / len(self.runs_s) if self.runs_s else self.estimate_s
        starts = (self.configs - config - 1) * (self.repeats if self.restart_each else 1)
        if self.restart_each:
            starts += self.repeats - repeat
        per_start = sum(self.startups_s) / len(self.startups_s) if self.startups_s else 0.0
        return runs * per_run + starts * per_start + (self.configs - config - 1) * self.cooldown_s

    def text(self, config: int, repeat: int) -> str:
        from ..fmt import duration

        return f"about {duration(self.left_s(config, repeat))} left"


async def run_sweep(spec: SweepSpec, out: Path, run_one: RunOne, on_line: Callable[[str], None] = print,
                    configs: list[Config] | None = None, estimate_s: float = 0.0, digest: str | None = None,
                    resume: bool = False) -> SweepOutcome:
    """Every configuration of `spec` (or `configs`, expanded already), into `out`."""
    configs = configs if configs is not None else spec.expand(free_port)
    sf, kept = open_sweep_file(spec, out, configs, digest, resume)
    outcome = SweepOutcome(sf)
    clock = TimeLeft(len(configs), spec.repeats, estimate_s, spec.restart_each, spec.cooldown_s)
    try:
        for i, config in enumerate(configs):
            if i in kept:
                on_line(f"redline: sweep configuration {i + 1} of {len(configs)}: {config.label}: completed before, kept (--resume)")
                continue
            where = f"configuration {i + 1} of {len(configs)}: {config.label}"
            status = await _one(config, i, sf, out, spec, run_one, _saying(on_line, where), clock)
            if status:
                outcome.status = status
                sf.end(f"stopped (exit {status})")
                return outcome
            if spec.cooldown_s and i + 1 < len(configs):
                await asyncio.sleep(spec.cooldown_s)
    except asyncio.CancelledError:
        sf.end("stopped by a signal")
        raise
    sf.end("sweep finished")
    return outcome


class ConfigServer:
    """One configuration's server, for a caller that runs the preset between `start` and
    `stop` (run_sweep below; the TUI's sweep, tui/sweep_view.py, from its start thread), once
    or `repeats` times (`begin(k)` names each repeat's session; `run_entry` records its end).
    No command (`--url`): nothing to start or stop."""

    def __init__(self, config: Config, session: Path, ready_timeout_s: float,
                 say: Callable[[str], None] = lambda s: None, on_wait: Callable[[str], None] = lambda s: None,
                 repeats: int = 1, gpus: int | None = None) -> None:
        self.config = config
        self.session = session  # OUT/<label>: the server's log; the session itself with one repeat
        self.ready_timeout_s = ready_timeout_s
        self.say = say
        self.on_wait = on_wait  # what it waits for, each poll ("41 s, /health answers 503")
        self.repeats = repeats
        self.gpus = gpus
        self.server: ServerProcess | None = None
        self.started: Started | None = None  # None until it answered (or without a command)
        self.first_startup_s: float | None = None
        self.runs: list[tuple[Path, str]] = []  # each repeat's session and status, as they end
        self.current: Path | None = None  # the repeat under way

    def session_for(self, k: int) -> Path:
        """Repeat k's session directory (from 1): OUT/<label> alone, else OUT/<label>/r<k>."""
        return self.session if self.repeats == 1 else self.session / f"r{k}"

    def begin(self, k: int) -> Path:
        self.current = self.session_for(k)
        return self.current

    async def start(self) -> bool:
        """Launch and wait until ready; False when it failed to start (`failed_entry`). A server
        that exited while another process holds the port redline picked for it (it lost the race
        for it: a client's connection took it as its own end) is launched once more, on another."""
        self.launch()
        if await self.ready():
            return True
        port = self.config.port
        if not self.config.port_picked or port is None or self.server is None or self.server.exited() is None or port_free(port):
            return False
        self.say(f"port {port} was taken by another process as it started: once more on another port")
        await asyncio.to_thread(self.server.stop)  # it exited: its sentinel released
        self.server = None
        self.launch()
        return await self.ready()

    def launch(self) -> None:
        """Start the server's process group. From a thread that outlives the server (the main
        one): its leader dies with the thread that launched it (PR_SET_PDEATHSIG). A port redline
        picked that another process took since (picked before the sweep began) is picked again."""
        if not self.config.command or self.server is not None:
            return
        if self.config.port_picked and self.config.port is not None and not port_free(self.config.port):
            self.config = self.config.on_port(free_port())
        config = self.config
        self.server = ServerProcess(config.command, self.session / SERVER_LOG)
        self.say(f"starting {config.describe()}")
        self.server.launch()

    async def ready(self) -> bool:
        """Wait until the launched server answers; False when it failed to start."""
        config = self.config
        if self.server is None:
            return True
        self.started = await self.server.wait_ready(config.url, self.ready_timeout_s, on_wait=self.on_wait)
        if not self.started.ok:
            self.say(f"failed to start: {self.started.why}")
            for line in self.started.tail[-5:]:
                self.say(f"  {line}")
            return False
        self.say(f"ready in {self.started.startup_s:.1f} s at {config.url}")
        if self.first_startup_s is None:
            self.first_startup_s = self.started.startup_s
        return True

    @property
    def startup_s(self) -> float | None:
        return self.started.startup_s if self.started is not None and self.started.ok else None

    def _entry(self, status: str, **kw: Any) -> dict:  # Any: entry()'s keywords, each its own type
        startup = self.first_startup_s if self.first_startup_s is not None else kw.pop("startup_s", self.startup_s)
        kw.pop("startup_s", None)
        return entry(self.config, status, startup_s=startup, runs=self.runs, repeats=self.repeats, gpus=self.gpus, **kw)

    def failed_entry(self) -> dict:
        """Its server did not get ready (at its first launch, or a relaunch: the repeats before are kept)."""
        st = self.started
        assert st is not None and not st.ok
        return self._entry(FAILED_TO_START, startup_s=st.startup_s, why=st.why, tail=st.tail)

    def run_entry(self, rc: int, why: str = "") -> dict:
        """The entry once the repeat under way ended with exit status `rc` (128 + N: a signal
        stopped it): `running` while repeats are still to come, then `completed`."""
        status = STOPPED if rc >= 128 else COMPLETED
        session = self.current or self.session_for(len(self.runs) + 1)
        if not why and 0 < rc < 128:  # 5: its log lost rows (what its meta.json says of it)
            why = loss_why(session) or f"exit status {rc}"
        self.runs.append((session, status))
        self.current = None
        if status == COMPLETED and len(self.runs) < self.repeats:
            status = RUNNING
        return self._entry(status, why=why)

    def stopped_entry(self, why: str = "") -> dict:
        """Stopped before its run ended (a cancel): what it measured, when it began."""
        if self.current is not None and self.current.exists():
            self.runs.append((self.current, STOPPED))
        self.current = None
        return self._entry(STOPPED, why=why)

    async def stop(self) -> None:
        if self.server is None:
            return
        self.say("stopping its server")
        await asyncio.to_thread(self.server.stop)
        self.server = None
        if not await wait_port_free(self.config.port):
            self.say(f"warning: port {self.config.port} is still taken after the stop")


def _saying(on_line: Callable[[str], None], where: str) -> Callable[[str], None]:
    """What one configuration says, as a sweep's line that names it."""
    return lambda s: on_line(f"redline: sweep {where}: {s}")


async def _one(config: Config, i: int, sf: SweepFile, out: Path, spec: SweepSpec, run_one: RunOne,
               say: Callable[[str], None], clock: TimeLeft) -> int:
    """One configuration, its repeats; a non-zero return is the status of a signal that stopped the sweep."""
    cs = ConfigServer(config, out / config.label, spec.ready_timeout_s, say=say, repeats=spec.repeats, gpus=spec.gpus)
    try:
        for k in range(1, spec.repeats + 1):
            if k == 1 or spec.restart_each:
                await cs.stop()
                if not await cs.start():
                    sf.set(i, cs.failed_entry())
                    return 0
                if cs.startup_s is not None:
                    clock.startups_s.append(cs.startup_s)
            if spec.repeats > 1:
                say(f"repeat {k} of {spec.repeats}, {clock.text(i, k)}")
            t0 = time.monotonic()
            rc = await run_one(cs.config, cs.begin(k), cs.startup_s, k)
            sf.set(i, cs.run_entry(rc))
            if rc >= 128:
                return rc  # a signal ended the run (its session is saved)
            clock.runs_s.append(time.monotonic() - t0)
        return 0
    except asyncio.CancelledError:
        sf.set(i, cs.stopped_entry())
        raise
    finally:
        await cs.stop()
