"""The built-in sim: what `redline` loads when no --url is given. The command line
(tui/cli/launch.py checked_config) leaves EngineConfig.url as BUILTIN_SIM; `running_target`
starts the sim then, once every value is checked, for the headless runner (tui/cli/) and for
the screen's start thread (tui/run_app.py StartingHost) alike."""

from __future__ import annotations

import argparse
import contextlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (`redline --help`)
if TYPE_CHECKING:
    from typing import Iterator

    from ..engine.api import EngineConfig

BUILTIN_SIM = ""  # EngineConfig.url before running_target has started the built-in sim
DEFAULT_SIM_PROFILE = "healthy"  # the sim's profile without --sim-profile


@contextlib.contextmanager
def running_target(cfg: EngineConfig, args: argparse.Namespace) -> Iterator[EngineConfig]:
    """The config with a URL to load: its own, or a built-in sim started here (stopped on
    exit) with --sim-profile and --seed (0 without one)."""
    if cfg.url != BUILTIN_SIM:
        yield cfg
        return
    import dataclasses  # here: `redline --help` does not wait for it

    from ..engine.api import spawn_sim_process

    seed = getattr(args, "seed", None)
    sim = spawn_sim_process(profile=args.profile or DEFAULT_SIM_PROFILE, seed=seed if seed is not None else 0)
    try:
        yield dataclasses.replace(cfg, url=sim.url)
    finally:
        sim.stop()


__all__ = ["BUILTIN_SIM", "DEFAULT_SIM_PROFILE", "running_target"]
