"""meta.json's `fingerprint` (engine/telemetry/fingerprint.py): what the server said of itself
and the launch command, written at the start (load_start.py prepare); the GPUs, added as soon
as telemetry read them (a task of the engine's). Through the session writer's update_meta,
like every meta.json change."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .. import __version__
from ..constants import FINGERPRINT_GPU_WAIT_S
from ..session.scrub import redact_argv
from ..telemetry.fingerprint import ask_server, fingerprint


def _launch_command(e: Any) -> list[str] | None:
    sweep = (e.config.meta_extra or {}).get("sweep")
    command = sweep.get("command") if isinstance(sweep, dict) else None
    return redact_argv(command) if command else None


async def open_fingerprint(e: Any, base: str) -> None:
    """The server's part, once the session is open (a server that says nothing more: what
    detection read)."""
    if e.session is None or e.target is None:
        return
    info = e.target.info
    version, raw = await ask_server(e.client, base, info.kind, dict(info.raw or {}))
    e.fingerprint_server = dict(kind=info.kind, version=version or info.version, raw=raw, model=e.target.model or info.model,
                                launch_command=_launch_command(e), redline_version=__version__)
    e.session.update_meta(fingerprint=fingerprint(**e.fingerprint_server))


async def gpu_fingerprint(e: Any, wait_s: float = FINGERPRINT_GPU_WAIT_S) -> None:
    """The GPUs as telemetry first read them (NVML or dcgm-exporter), added to the fingerprint
    as soon as it did (a task of the engine's, cancelled with it); none within `wait_s`: none."""
    part = getattr(e, "fingerprint_server", None)
    hub = e.telemetry
    if e.session is None or part is None or hub is None:
        return
    end = time.monotonic() + wait_s
    while not hub.gpus:
        if time.monotonic() >= end:
            return
        await asyncio.sleep(0.25)
    e.session.update_meta(fingerprint=fingerprint(**part, gpus=hub.gpus, gpu_source=hub.gpu_source))
