"""Helpers shared by the test modules, one module for each kind (each helper is defined in one
of them, and named here so that `from helpers import NAME` reaches it from any test folder:
tests/conftest.py's folder is on sys.path):

- paths.py: ROOT (the checkout, the folder with pyproject.toml), FIXTURES (tests/fixtures/);
- waits.py: bounded polling (wait_for, until, a Textual app's settle);
- fuzzing.py: how many examples a fuzzer runs under each hypothesis profile (examples);
- sim.py: the simulated server's settings for short answers (FAST_SIM, CAP8_SIM) and its exact
  counters (/sim/state: sim_state, sim_running, their async forms, common_prefix_len);
- redline.py: redline itself (the console script, `main` in this process, a preset file, a
  headless run as a process or in-process, steady_in);
- nvml.py: a fake NVML library (FakeNvml);
- servers.py: small servers on 127.0.0.1 for what the sim does not do (ThreadedServer,
  MiniServer, ThreadServer, raw_server, free_port);
- sglang.py: a server that answers as SGLang 0.5.9 or 0.5.23 does (SglangFixture).

The fixtures that start servers (and mark their tests `server`) are in tests/conftest.py.
"""

from .fuzzing import examples
from .nvml import FakeNvml
from .paths import FIXTURES, ROOT, TESTS
from .redline import (
    finish,
    main_in_process,
    redline_command,
    run_preset_headless,
    start_headless,
    steady_in,
    write_preset,
)
from .servers import MiniServer, ThreadedServer, ThreadHandler, ThreadServer, free_port, raw_server
from .sglang import SglangFixture
from .sim import CAP8_SIM, FAST_SIM, common_prefix_len, sim_running, sim_running_async, sim_state, sim_state_async
from .waits import settle, until, wait_for

__all__ = [
    "CAP8_SIM", "FAST_SIM", "FIXTURES", "ROOT", "TESTS", "FakeNvml", "MiniServer", "SglangFixture", "ThreadHandler",
    "ThreadServer", "ThreadedServer", "common_prefix_len", "examples", "finish", "free_port", "main_in_process",
    "raw_server", "redline_command", "run_preset_headless", "settle", "sim_running", "sim_running_async", "sim_state",
    "sim_state_async", "start_headless", "steady_in", "until", "wait_for", "write_preset",
]
