"""Which road a stream's reads take: the C helper or Python.

engine/client/_speedups.c does, one call per socket read, what engine/client/sse.py and the
OpenAI decoder of engine/client/api_formats.py do per event, and hands back to them (in
order) every event it does not read exactly as they would. It is built at install time where
a C compiler is (setup.py, optional: a failed build installs without it); where it is not,
every stream takes the Python road, which gives the same values (tests/unit/engine/client/test_speedups.py feeds
both the same bytes). Only the plain OpenAI decoders have a C road: /generate, and a stream
whose answer text is collected (multi-turn), stay in Python.

REDLINE_SPEEDUPS=0 in the environment (read once, at import) keeps every stream in Python.
"""

from __future__ import annotations

import os
from typing import Any

from ..constants import SPEEDUPS_ENV, SPEEDUPS_OFF
from . import sse
from .api_formats import CHAT, COMPLETIONS

try:
    from . import _speedups  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler at install): the Python road
    _speedups = None

__all__ = ["AVAILABLE", "ENABLED", "recv_stamped", "splitter"]

AVAILABLE = _speedups is not None
ENABLED = AVAILABLE and os.environ.get(SPEEDUPS_ENV, "1").strip().lower() not in SPEEDUPS_OFF
_MODES = {CHAT: 0, COMPLETIONS: 1}

if _speedups is not None:
    DONE, CONTENT, ANSWER, TOO_BIG = _speedups.DONE, _speedups.CONTENT, _speedups.ANSWER, _speedups.TOO_BIG
else:
    DONE, CONTENT, ANSWER, TOO_BIG = 1, 2, 4, 8


# engine/client/kstamp.py's read in C, or None
recv_stamped = getattr(_speedups, "recv_stamped", None) if ENABLED else None  # Linux only


def splitter(api: str, text: bool, enabled: bool | None = None) -> Any | None:
    """A C splitter for one stream of `api`, or None: the Python road (no helper, turned off,
    /generate, or `text`: the answer text is collected)."""
    on = ENABLED if enabled is None else enabled and AVAILABLE
    mode = _MODES.get(api)
    if not on or text or mode is None:
        return None
    return _speedups.Splitter(mode, sse.MAX_EVENT_BYTES)
