"""Running a sweep: for each configuration in turn, launch its server (its own process group,
its output in `OUT/<label>/server.log`), wait until it is ready (its startup time is a
figure), run the preset against it exactly as `redline run` does (`run_one`, the caller's:
the headless runner) into `OUT/<label>/`, stop its whole group and confirm its port is free,
then the next. `OUT/sweep.json` is rewritten after each (engine/sweep/record.py).

A configuration whose server exits or never gets ready is `failed_to_start` (why, and the last
lines of its log) and the sweep goes on. A cancel (a signal: the caller cancels the task)
stops the current server's group, keeps every finished configuration and writes the file.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from .record import COMPLETED, FAILED_TO_START, STOPPED, SweepFile, entry, loss_why
from .server_proc import ServerProcess, Started, free_port, wait_port_free
from .spec import Config, SweepSpec

SERVER_LOG = "server.log"

# run_one(config, session dir, startup_s) -> the exit status of `redline run --headless`
RunOne = Callable[[Config, Path, "float | None"], Awaitable[int]]


@dataclass
class SweepOutcome:
    file: SweepFile
    status: int = 0  # 0, or the signal's 128 + N when one stopped it


def open_sweep_file(spec: SweepSpec, out: Path, configs: list[Config]) -> SweepFile:
    """OUT/sweep.json with every configuration `not_run`, written at once."""
    head = {"serve": spec.serve, "urls": list(spec.urls) or None, "preset": spec.preset}
    sf = SweepFile(out, head, configs)
    sf.write()
    return sf


async def run_sweep(spec: SweepSpec, out: Path, run_one: RunOne, on_line: Callable[[str], None] = print,
                    configs: list[Config] | None = None) -> SweepOutcome:
    """Every configuration of `spec` (or `configs`, expanded already), into `out`."""
    configs = configs if configs is not None else spec.expand(free_port)
    sf = open_sweep_file(spec, out, configs)
    outcome = SweepOutcome(sf)
    try:
        for i, config in enumerate(configs):
            where = f"configuration {i + 1} of {len(configs)}: {config.label}"
            status = await _one(config, i, sf, out, spec, run_one, lambda s, w=where: on_line(f"redline: sweep {w}: {s}"))
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
    `stop` (run_sweep below; the TUI's sweep, tui/sweep_view.py, from its start thread). No
    command (`--url`): nothing to start or stop."""

    def __init__(self, config: Config, session: Path, ready_timeout_s: float,
                 say: Callable[[str], None] = lambda s: None, on_wait: Callable[[str], None] = lambda s: None) -> None:
        self.config = config
        self.session = session
        self.ready_timeout_s = ready_timeout_s
        self.say = say
        self.on_wait = on_wait  # what it waits for, each poll ("41 s, /health answers 503")
        self.server: ServerProcess | None = None
        self.started: Started | None = None  # None until it answered (or without a command)

    async def start(self) -> bool:
        """Launch and wait until ready; False when it failed to start (`failed_entry`)."""
        self.launch()
        return await self.ready()

    def launch(self) -> None:
        """Start the server's process group. From a thread that outlives the server (the main
        one): its leader dies with the thread that launched it (PR_SET_PDEATHSIG)."""
        config = self.config
        if not config.command or self.server is not None:
            return
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
        return True

    @property
    def startup_s(self) -> float | None:
        return self.started.startup_s if self.started is not None and self.started.ok else None

    def failed_entry(self) -> dict:
        st = self.started
        assert st is not None and not st.ok
        return entry(self.config, FAILED_TO_START, startup_s=st.startup_s, why=st.why, tail=st.tail)

    def run_entry(self, rc: int, why: str = "") -> dict:
        """The entry of a run that ended with exit status `rc` (128 + N: a signal stopped it)."""
        status = STOPPED if rc >= 128 else COMPLETED
        if not why and 0 < rc < 128:  # 5: its log lost rows (what its meta.json says of it)
            why = loss_why(self.session) or f"exit status {rc}"
        return entry(self.config, status, startup_s=self.startup_s, session_dir=self.session, why=why)

    def stopped_entry(self, why: str = "") -> dict:
        """Stopped before its run ended (a cancel): what it measured, when it began."""
        session = self.session if self.session.exists() else None
        return entry(self.config, STOPPED, startup_s=self.startup_s, session_dir=session, why=why)

    async def stop(self) -> None:
        if self.server is None:
            return
        self.say("stopping its server")
        await asyncio.to_thread(self.server.stop)
        self.server = None
        if not await wait_port_free(self.config.port):
            self.say(f"warning: port {self.config.port} is still taken after the stop")


async def _one(config: Config, i: int, sf: SweepFile, out: Path, spec: SweepSpec, run_one: RunOne,
               say: Callable[[str], None]) -> int:
    """One configuration; a non-zero return is the status of a signal that stopped the sweep."""
    session = out / config.label
    cs = ConfigServer(config, session, spec.ready_timeout_s, say=say)
    try:
        if not await cs.start():
            sf.set(i, cs.failed_entry())
            return 0
        rc = await run_one(config, session, cs.startup_s)
        sf.set(i, cs.run_entry(rc))
        return rc if rc >= 128 else 0  # a signal ended the run (its session is saved)
    except asyncio.CancelledError:
        sf.set(i, cs.stopped_entry())
        raise
    finally:
        await cs.stop()
