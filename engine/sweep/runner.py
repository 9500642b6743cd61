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

from .record import COMPLETED, FAILED_TO_START, STOPPED, SweepFile, entry
from .server_proc import ServerProcess, free_port, wait_port_free
from .spec import Config, SweepSpec

SERVER_LOG = "server.log"

# run_one(config, session dir, startup_s) -> the exit status of `redline run --headless`
RunOne = Callable[[Config, Path, "float | None"], Awaitable[int]]


@dataclass
class SweepOutcome:
    file: SweepFile
    status: int = 0  # 0, or the signal's 128 + N when one stopped it


async def run_sweep(spec: SweepSpec, out: Path, run_one: RunOne, on_line: Callable[[str], None] = print,
                    configs: list[Config] | None = None) -> SweepOutcome:
    """Every configuration of `spec` (or `configs`, expanded already), into `out`."""
    configs = configs if configs is not None else spec.expand(free_port)
    head = {"serve": spec.serve, "urls": list(spec.urls) or None, "preset": spec.preset}
    sf = SweepFile(out, head, configs)
    sf.write()
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


async def _one(config: Config, i: int, sf: SweepFile, out: Path, spec: SweepSpec, run_one: RunOne,
               say: Callable[[str], None]) -> int:
    """One configuration; a non-zero return is the status of a signal that stopped the sweep."""
    session = out / config.label
    server = None
    startup = None
    try:
        if config.command:
            server = ServerProcess(config.command, session / SERVER_LOG)
            say(f"starting {config.describe()}")
            server.launch()
            started = await server.wait_ready(config.url, spec.ready_timeout_s, on_wait=lambda s: None)
            if not started.ok:
                say(f"failed to start: {started.why}")
                for line in started.tail[-5:]:
                    say(f"  {line}")
                sf.set(i, entry(config, FAILED_TO_START, startup_s=started.startup_s, why=started.why, tail=started.tail))
                return 0
            startup = started.startup_s
            say(f"ready in {startup:.1f} s at {config.url}")
        rc = await run_one(config, session, startup)
        if rc >= 128:  # a signal ended the run (its session is saved)
            sf.set(i, entry(config, STOPPED, startup_s=startup, session_dir=session))
            return rc
        sf.set(i, entry(config, COMPLETED, startup_s=startup, session_dir=session, why="" if rc == 0 else f"exit status {rc}"))
        return 0
    except asyncio.CancelledError:
        sf.set(i, entry(config, STOPPED, startup_s=startup, session_dir=session if session.exists() else None))
        raise
    finally:
        if server is not None:
            say("stopping its server")
            await asyncio.to_thread(server.stop)
            if not await wait_port_free(config.port):
                say(f"warning: port {config.port} is still taken after the stop")
