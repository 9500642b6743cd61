"""meta.json's `fingerprint` (engine/telemetry/fingerprint.py): what the server said of itself
and the launch command, written at the start (load_start.py prepare); the GPUs, added as soon
as telemetry read them (a task of the engine's). Through the session writer's update_meta,
like every meta.json change; the server's part is kept by the engine's Disk (engine/core/disk.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from .. import __version__
from ..constants import FINGERPRINT_GPU_WAIT_S
from ..session.scrub import redact_argv
from ..telemetry.fingerprint import ask_server, fingerprint

if TYPE_CHECKING:
    import httpx

    from ..client.target import Target
    from ..session import SessionWriter
    from ..telemetry.hub import TelemetryHub
    from ..telemetry.types import GpuSample
    from .config import EngineConfig


@dataclass(frozen=True)
class ServerFingerprint:
    """The fingerprint's server part: what it said of itself, and what launched it."""

    kind: str
    version: str
    raw: dict[str, Any]  # Any: the server's own JSON (engine/telemetry/fingerprint.py reads it so)
    model: str
    launch_command: Sequence[str] | None
    redline_version: str = __version__

    def doc(self, gpus: Sequence[GpuSample] = (), gpu_source: str = "") -> dict[str, Any]:
        """meta.json's `fingerprint` (with the GPUs once telemetry read them)."""
        return fingerprint(kind=self.kind, version=self.version, raw=self.raw, model=self.model, launch_command=self.launch_command,
                           gpus=gpus, gpu_source=gpu_source, redline_version=self.redline_version)


def _launch_command(cfg: EngineConfig) -> list[str] | None:
    sweep = (cfg.meta_extra or {}).get("sweep")
    command = sweep.get("command") if isinstance(sweep, dict) else None
    return redact_argv(command) if command else None


async def open_fingerprint(cfg: EngineConfig, session: SessionWriter | None, client: httpx.AsyncClient, target: Target,
                           base: str) -> ServerFingerprint | None:
    """The server's part, written once the session is open (a server that says nothing more:
    what detection read); None without a session."""
    if session is None:
        return None
    info = target.info
    version, raw = await ask_server(client, base, info.kind, dict(info.raw or {}))
    part = ServerFingerprint(kind=info.kind, version=version or info.version, raw=raw, model=target.model or info.model,
                             launch_command=_launch_command(cfg))
    session.update_meta(fingerprint=part.doc())
    return part


async def gpu_fingerprint(session: SessionWriter | None, part: ServerFingerprint | None, hub: TelemetryHub,
                          wait_s: float = FINGERPRINT_GPU_WAIT_S) -> None:
    """The GPUs as telemetry first read them (NVML or dcgm-exporter), added to the fingerprint
    as soon as it did (a task of the engine's, cancelled with it); none within `wait_s`: none."""
    if session is None or part is None:
        return
    end = time.monotonic() + wait_s
    while not hub.gpus:
        if time.monotonic() >= end:
            return
        await asyncio.sleep(0.25)
    session.update_meta(fingerprint=part.doc(gpus=hub.gpus, gpu_source=hub.gpu_source))
