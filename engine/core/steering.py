"""Who steers the engine: its one command table, the driver steering it now (a preset runner's
task, which an operator's command cancels), the driver's line for the screen, and the ways in
from outside (the control API, a host's way to end the session).

The table maps each command type (engine/core/commands.py) to what runs it. The engine's own
commands are engine/core/engine.py COMMANDS; a host gives the engine the table that adds the
preset runner's (engine/run/preset_runner.py COMMANDS: StartPreset, StartProfile), once, when
it makes the engine (`new_engine`): nothing sets it afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generic, Mapping, Protocol, TypeVar

E = TypeVar("E")
# Any: each command type's handler takes that type, which a table keyed by type cannot say
Handler = Callable[[E, Any], object]


class ControlApi(Protocol):
    """The control API as the engine keeps it (engine/control/http_api.py ControlServer, a layer
    above): where it listens, and its close at the stop."""

    @property
    def url(self) -> str: ...

    async def close(self) -> None: ...


class Driven(Protocol):
    """The steering as a reader sees it (the snapshot, the once-a-second checks)."""

    line: str

    @property
    def driving(self) -> bool: ...

    def cancel_driver(self) -> bool: ...


class Steering(Generic[E]):
    def __init__(self, commands: Mapping[type, Handler[E]]) -> None:
        self.commands = commands  # command type -> what runs it (see the module docstring)
        self.driver: asyncio.Task[object] | None = None  # a task steering the engine (a preset); operator commands cancel it
        self.line = ""  # what the driver is doing, for the screen ("... step 2/6 C=16 measuring 12/30s")
        self.control: ControlApi | None = None  # --control: the control API (engine/control/http_api.py), started by start_engine
        self.on_stop_request: Callable[[str], None] | None = None  # a host's way to end the session (POST /v1/stop)

    def handler(self, cmd: object) -> Handler[E]:
        run = self.commands.get(type(cmd))
        if run is None:
            raise TypeError(f"unknown command {cmd!r}")
        return run

    def drive(self, task: asyncio.Task[object]) -> None:
        """`task` steers the engine from now (the one before it cancelled)."""
        self.cancel_driver()
        self.driver = task

    @property
    def driving(self) -> bool:
        return self.driver is not None and not self.driver.done()

    def cancel_driver(self) -> bool:
        task, self.driver = self.driver, None
        if task is not None and not task.done():
            task.cancel()
            return True
        return False
