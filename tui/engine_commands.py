"""The engine's commands as the screen sends them (engine/core/commands.py, imported when the first
command is sent: the first frame does not wait for it), and an engine error as one line (error_line)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..engine import api

if TYPE_CHECKING:
    from ..engine.api import commands
else:
    class _Commands:
        """engine/core/commands.py, imported when the first command is sent."""

        def __getattr__(self, name: str):
            value = getattr(api.commands, name)
            setattr(self, name, value)
            return value

    commands = _Commands()

__all__ = ["commands", "error_line"]


def error_line(exc: BaseException) -> str:
    """An engine error as the operator reads it: on one line (engine/text.py one_line), without
    the exception's class name that a reply from the engine's process carries ("WorkloadError: ...")."""
    text = api.one_line(exc) or exc.__class__.__name__
    return re.sub(r"^[A-Z]\w*(Error|Exception): ", "", text)
