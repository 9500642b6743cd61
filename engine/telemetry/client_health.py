"""Can redline's timings be trusted this second? Event-loop lag, and what caused it.

redline timestamps tokens when their bytes reach its event loop. If the loop is late, every
latency it reports is inflated by that lateness. ``LoopLagMonitor`` measures the lateness
directly: a task that sleeps a fixed interval and records how late it woke.

Lateness has different causes, and the operator needs the one that was measured:

- ``client_cpu``: the process running redline's loop is near a full core (or busy while the
  loop lags): redline itself is the bottleneck.
- ``machine_busy``: the loop lags while its thread waited for a CPU (Linux counts that wait in
  /proc/<pid>/task/<tid>/schedstat) and other processes use the CPUs, or while the hypervisor
  steals CPU time: redline is descheduled, not busy.
- ``loop_blocked``: the loop lags with little CPU of its own and without waiting for a CPU:
  something held it without computing (a blocking call, a disk write).

A busy machine with a healthy loop is not a problem for the measurement: nothing is said.

``ClientHealth`` reads the lag, the CPU of redline's processes, the machine's CPU times
(``/proc/stat`` through psutil) and the loop thread's run-queue wait, and turns them into a
verdict with a one-line warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol, cast

import psutil

from .types import ClientHealthSample

__all__ = [
    "CAUSES",
    "CHILDREN_REFRESH_S",
    "CPU_MIN_WINDOW_S",
    "CPU_OVERLOAD_PCT",
    "IOWAIT_NOTE_PCT",
    "LAG_INTERVAL_S",
    "LAG_OVERLOAD_MS",
    "LAG_WINDOW_S",
    "LOOP_BUSY_PCT",
    "MACHINE_BUSY_PCT",
    "OTHERS_BUSY_PCT",
    "RUN_WAIT_LAG_SHARE",
    "STEAL_BUSY_PCT",
    "ClientHealth",
    "LagStats",
    "LoopLagMonitor",
    "MachineCpu",
    "MachineCpuReader",
    "MachineView",
    "OwnCpu",
    "ProcessTreeCpu",
    "Reading",
    "RunQueueWait",
    "machine_busy",
    "machine_view",
    "verdict",
]

# -- thresholds, all in one place ---------------------------------------------------------
LAG_INTERVAL_S = 0.05  # the monitor's sleep; its overshoot is the lag
LAG_WINDOW_S = 5.0  # lag statistics (and the CPU readings that explain them) cover this window
# Lag p99 above this makes measured TTFT/ITL untrustworthy: at 20 ms the measurement error is
# already comparable to a decode step (ITL of a busy server is 10-50 ms).
LAG_OVERLOAD_MS = 20.0
# One Python interpreter cannot use more than one core for its event loop: above this share
# of a core the loop's process is saturated and queues its own work (a warning even without lag).
CPU_OVERLOAD_PCT = 90.0
# While the loop lags: at or above this share of a core, the loop's own work explains the lag;
# below it, redline had "little CPU of its own" and the lag came from elsewhere.
LOOP_BUSY_PCT = 50.0
# While the loop lags, it was descheduled when its thread waited on the run queue, in some
# reading of the window, at least this share of the lag (ms per second vs the lag's ms): a
# 32 ms lag from descheduling is one wait of about 32 ms; a 200 ms blocking call is not.
RUN_WAIT_LAG_SHARE = 0.5
# ... and the machine is busy when the loop was descheduled and processes other than redline's
# use at least OTHERS_BUSY_PCT (100 = one core), or when the hypervisor steals at least
# STEAL_BUSY_PCT of the machine's CPU time. Where the run-queue wait cannot be read (not
# Linux), the machine is busy when its CPUs are at least MACHINE_BUSY_PCT full (% of all
# cores, steal included) and other processes use at least OTHERS_BUSY_PCT.
OTHERS_BUSY_PCT = 50.0
STEAL_BUSY_PCT = 5.0
MACHINE_BUSY_PCT = 85.0
# A stalled loop's warning names the machine's iowait when it is at least this (% of all cores).
IOWAIT_NOTE_PCT = 5.0
# Finding child processes scans /proc; do it this often, not on every status() call.
CHILDREN_REFRESH_S = 5.0
# A CPU % over a shorter window is one scheduler tick magnified (10 ms in 0.1 ms reads as
# 10,000 %): a reading asked for sooner than this after the previous one is None, and the
# next one spans both.
CPU_MIN_WINDOW_S = 0.1

CAUSES = ("", "client_cpu", "loop_blocked", "machine_busy")


class LagStats(NamedTuple):
    """Event-loop lag over the recent window, in milliseconds (0 when nothing recorded)."""

    p99_ms: float
    max_ms: float
    n: int


class OwnCpu(NamedTuple):
    """CPU of redline's processes since the last reading (100 = one full core)."""

    total_pct: float  # the whole process tree (redline and its children, e.g. a --sim server)
    loop_pct: float  # the process that runs the event loop (the tree's root)
    busiest_pct: float  # the busiest single process of the tree


class MachineCpu(NamedTuple):
    """The whole machine's CPU since the last reading."""

    busy_pct: float  # all processes, 100 = one full core, up to 100 * ncpu (steal not included)
    steal_pct: float  # CPU time taken by the hypervisor, % of all cores (0-100)
    iowait_pct: float  # idle CPUs waiting on disk, % of all cores (0-100)
    ncpu: int


class LagSource(Protocol):
    def lag_ms(self) -> LagStats: ...


def _p99(values: list[float]) -> float:
    """Nearest-rank 99th percentile (the max for fewer than 100 values)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class LoopLagMonitor:
    """Measures how late the running event loop wakes a task that sleeps ``interval_s``.

    The loop records; ``lag_ms()`` may be read from another thread (the engine reads it from a
    worker thread), so both hold a small lock.
    """

    def __init__(
        self,
        interval_s: float = LAG_INTERVAL_S,
        window_s: float = LAG_WINDOW_S,
        clock: Callable[[], float] = time.perf_counter,
        loops: int = 1,
    ) -> None:
        """`loops`: how many loops' wake-ups this one keeps (the window's worth of each): the
        load workers' loops, recorded from their reports (engine/telemetry/load_lag.py)."""
        if interval_s <= 0 or window_s <= 0:
            raise ValueError(f"interval_s and window_s must be > 0, got {interval_s}, {window_s}")
        self.interval_s = interval_s
        self.window_s = window_s
        self.clock = clock
        self._lags: deque[tuple[float, float]] = deque(maxlen=loops * (int(window_s / interval_s) + 64))
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self.thread_id: int | None = None  # native id of the thread that runs the loop

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start measuring on the running loop (call from a coroutine on that loop)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="redline-loop-lag")

    async def stop(self) -> None:
        """Stop measuring; waits for the task to finish."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def record(self, t: float, lag_s: float) -> None:
        """Add one observation (the task does this; exposed for tests and other sources)."""
        with self._lock:
            self._lags.append((t, max(0.0, lag_s)))

    def since(self, since: float) -> list[tuple[float, float]]:
        """The wake-ups recorded after `since`: (time, lag in seconds), oldest first."""
        with self._lock:
            return [(t, lag) for t, lag in self._lags if t > since]

    def max_since(self, since: float) -> float:
        """The worst lag (ms) recorded at or after `since` (0 when none)."""
        with self._lock:
            return 1000.0 * max((lag for t, lag in self._lags if t >= since), default=0.0)

    def lag_ms(self, now: float | None = None) -> LagStats:
        """p99 and max lag over the last ``window_s`` seconds."""
        now = self.clock() if now is None else now
        with self._lock:
            recent = [lag for t, lag in self._lags if t >= now - self.window_s]
        if not recent:
            return LagStats(0.0, 0.0, 0)
        return LagStats(1000.0 * _p99(recent), 1000.0 * max(recent), len(recent))

    async def _run(self) -> None:
        self.thread_id = threading.get_native_id()
        while True:
            t0 = self.clock()
            await asyncio.sleep(self.interval_s)
            t1 = self.clock()
            self.record(t1, t1 - t0 - self.interval_s)


class ProcessTreeCpu:
    """CPU % of a process and its children since the previous call (None until primed).

    Each call reads one /proc/<pid>/stat per process; the child list (a /proc scan) is
    refreshed every CHILDREN_REFRESH_S. A call less than CPU_MIN_WINDOW_S after the previous
    reading is None (it reads nothing, so the next reading covers the whole time since).
    """

    def __init__(self, pid: int | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._root: psutil.Process | None
        try:
            self._root = psutil.Process(pid if pid is not None else os.getpid())
        except psutil.Error:
            self._root = None
        self._procs: dict[int, psutil.Process] = {}
        self._primed: set[int] = set()
        self._children_at = -math.inf
        self._read_at = -math.inf
        self._refresh_tree()
        self()  # prime psutil's counters: its first reading of a process is meaningless

    def _refresh_tree(self) -> None:
        if self._root is None:
            return
        try:
            tree = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            tree = [self._root]
        fresh: dict[int, psutil.Process] = {}
        for p in tree:
            old = self._procs.get(p.pid)
            fresh[p.pid] = old if old is not None and old == p else p  # keep primed objects
        self._primed &= set(fresh)
        self._procs = fresh
        self._children_at = self.clock()

    def __call__(self) -> OwnCpu | None:
        now = self.clock()
        if now - self._read_at < CPU_MIN_WINDOW_S:
            return None
        self._read_at = now
        if now - self._children_at >= CHILDREN_REFRESH_S:
            self._refresh_tree()
        root_pid = self._root.pid if self._root is not None else None
        total, busiest, loop, any_value = 0.0, 0.0, None, False
        for pid, p in list(self._procs.items()):
            try:
                pct = p.cpu_percent(interval=None)
            except psutil.Error:
                self._procs.pop(pid, None)
                self._primed.discard(pid)
                continue
            if pid not in self._primed:
                self._primed.add(pid)
                continue
            any_value = True
            total += pct
            busiest = max(busiest, pct)
            if pid == root_pid:
                loop = pct
        if not any_value:
            return None
        return OwnCpu(total, busiest if loop is None else loop, busiest)


class MachineCpuReader:
    """The machine's CPU times (one read of /proc/stat) since the previous call.

    Keeps its own previous reading, so other users of psutil's module-level
    ``cpu_times_percent`` state do not disturb it. None on the first call.
    """

    def __init__(self, times: Callable[[], object] = psutil.cpu_times, ncpu: int | None = None) -> None:
        self._times = times
        self.ncpu = ncpu or psutil.cpu_count() or 1
        self._last = self._read()

    def _read(self) -> dict[str, float] | None:
        try:
            t = self._times()
        except (psutil.Error, OSError):
            return None
        fields = t._asdict() if hasattr(t, "_asdict") else dict(cast("Mapping[str, float]", t))  # psutil's namedtuple, or a mapping
        # Linux counts guest time inside user (and guest_nice inside nice): not twice.
        return {k: float(v) for k, v in fields.items() if k not in ("guest", "guest_nice")}

    def __call__(self) -> MachineCpu | None:
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None:
            return None
        delta = {k: max(0.0, now[k] - last.get(k, 0.0)) for k in now}
        all_s = sum(delta.values())
        if all_s <= 0:
            return None
        idle = delta.get("idle", 0.0) + delta.get("iowait", 0.0)
        steal = delta.get("steal", 0.0)
        busy = max(0.0, all_s - idle - steal)
        return MachineCpu(
            busy_pct=100.0 * self.ncpu * busy / all_s,
            steal_pct=100.0 * steal / all_s,
            iowait_pct=100.0 * delta.get("iowait", 0.0) / all_s,
            ncpu=self.ncpu,
        )


class RunQueueWait:
    """How long the loop's thread waited for a CPU (runnable, not running), in ms per second
    since the previous call: the second field of /proc/<pid>/task/<tid>/schedstat, in ns.

    ``thread_id`` gives the loop thread's native id (the monitor learns it when it starts);
    None until then, and wherever the file cannot be read (not Linux).
    """

    def __init__(
        self,
        thread_id: Callable[[], int | None],
        pid: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.thread_id = thread_id
        self.pid = pid if pid is not None else os.getpid()
        self.clock = clock
        self._last: tuple[int, float, float] | None = None  # (tid, t, wait ns)

    def _read(self, tid: int) -> float | None:
        try:
            with open(f"/proc/{self.pid}/task/{tid}/schedstat", "rb") as f:
                return float(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def __call__(self) -> float | None:
        tid = self.thread_id()
        if tid is None:
            return None
        wait_ns, t = self._read(tid), self.clock()
        last = self._last
        self._last = None if wait_ns is None else (tid, t, wait_ns)
        if wait_ns is None or last is None or last[0] != tid or t <= last[1]:
            return None
        return max(0.0, wait_ns - last[2]) / 1e6 / (t - last[1])


class MachineView(NamedTuple):
    """The machine as the loop saw it over one reading: what other processes took."""

    others_pct: float  # CPU of processes other than redline's tree, 100 = one core
    full_pct: float  # how full the machine's CPUs were, steal included, % of all cores
    steal_pct: float  # % of all cores
    iowait_pct: float  # % of all cores
    ncpu: int


def machine_view(own: OwnCpu | None, machine: MachineCpu) -> MachineView:
    """Other processes' share of one machine reading (the machine less redline's tree)."""
    others = max(0.0, machine.busy_pct - (own.total_pct if own is not None else 0.0))
    full = machine.busy_pct / machine.ncpu + machine.steal_pct
    return MachineView(others, full, machine.steal_pct, machine.iowait_pct, machine.ncpu)


def machine_busy(v: MachineView, run_wait_ms: float | None = None, lag_ms: float = 0.0) -> bool:
    """Did the machine hold the loop up? Steal; or the loop's thread waited for a CPU (about as
    long as it lagged) while other processes used the CPUs. Without the wait (not Linux): full
    CPUs that other processes fill.
    """
    if v.steal_pct >= STEAL_BUSY_PCT:
        return True
    if v.others_pct < OTHERS_BUSY_PCT:
        return False
    if run_wait_ms is not None:
        return run_wait_ms >= RUN_WAIT_LAG_SHARE * lag_ms
    return v.full_pct >= MACHINE_BUSY_PCT


class Reading(NamedTuple):
    """What one status() call read (None: that source could not be read)."""

    t: float
    own: OwnCpu | None
    machine: MachineView | None
    run_wait_ms: float | None  # ms per second the loop's thread waited for a CPU


def _fmt(pct: float) -> str:
    return f"{pct:.0f} %"


def verdict(
    lag_p99_ms: float | None,
    readings: list[Reading],
    *,
    lag_threshold_ms: float = LAG_OVERLOAD_MS,
    cpu_threshold_pct: float = CPU_OVERLOAD_PCT,
    in_workers: bool = False,
) -> tuple[str, str]:
    """(cause, one-line warning); ("", "") when the timings can be trusted.

    ``readings`` cover the lag's window, the newest last. Without lag over its threshold only
    a saturated loop process (in the newest reading) is worth a word, whatever the machine
    does. With it, the readings of the window say why: the loop's own CPU (its busiest
    reading), the machine (any reading where it held the loop up), or neither (a stall).

    ``in_workers``: the lag is the load workers' (engine/telemetry/load_lag.py): the
    coordinator's own loop stamps nothing, so its CPU alone says nothing; a worker's lag is
    explained by the busiest process of redline's tree (a worker, when one is saturated).
    """
    now = readings[-1] if readings else None
    loop_now = now.own.loop_pct if now is not None and now.own is not None else None
    if lag_p99_ms is None or lag_p99_ms <= lag_threshold_ms:
        if loop_now is not None and loop_now > cpu_threshold_pct and not in_workers:
            return "client_cpu", (
                f"client overloaded: redline's loop at {_fmt(loop_now)} CPU — latencies inflated "
                "by redline itself"
            )
        return "", ""
    who = "a load worker's " if in_workers else ""
    lag_text = f"{who}event-loop lag {lag_p99_ms:.0f} ms"
    loops = [r.own.busiest_pct if in_workers else r.own.loop_pct for r in readings if r.own is not None]
    loop = max(loops) if loops else None
    own_work = (
        f"client overloaded: redline's loop at {_fmt(loop or 0.0)} CPU, {lag_text} — latencies "
        "inflated by redline itself"
    )
    if loop is not None and loop > cpu_threshold_pct:
        return "client_cpu", own_work
    held = [
        r.machine
        for r in readings
        if r.machine is not None and machine_busy(r.machine, r.run_wait_ms, lag_p99_ms)
    ]
    if held:
        m = max(held, key=lambda v: (v.steal_pct >= STEAL_BUSY_PCT, v.others_pct))
        return "machine_busy", (
            f"machine busy: other processes use {_fmt(m.others_pct)} CPU (steal "
            f"{_fmt(m.steal_pct)}), {lag_text} — timings may be inflated by other processes"
        )
    if loop is not None and loop >= LOOP_BUSY_PCT:
        return "client_cpu", own_work
    own = f"redline at {_fmt(loop)} CPU" if loop is not None else "redline's CPU unknown"
    iowaits = [r.machine.iowait_pct for r in readings if r.machine is not None]
    iowait = (
        f", machine iowait {_fmt(max(iowaits))}" if iowaits and max(iowaits) >= IOWAIT_NOTE_PCT else ""
    )
    return "loop_blocked", (
        f"loop stalled: {lag_text} with {own}{iowait} — disk or machine; latencies may be inflated"
    )


class ClientHealth:
    """Loop lag, redline's own CPU, the machine's CPU and the loop thread's wait for a CPU,
    turned into a verdict once a second.

    ``status()`` runs on a worker thread (it reads /proc): a few small reads per call, the
    child-process scan only every CHILDREN_REFRESH_S. Every source can be replaced (tests):
    ``monitor`` has ``lag_ms()``; ``own_cpu()`` returns an OwnCpu, ``machine_cpu()`` a
    MachineCpu, ``run_wait()`` the loop thread's run-queue wait in ms per second (each None
    when unknown). A lag is a statistic over the monitor's window, so it is explained by the
    readings over that same window.
    """

    def __init__(
        self,
        monitor: LagSource | None = None,
        *,
        pid: int | None = None,
        lag_threshold_ms: float = LAG_OVERLOAD_MS,
        cpu_threshold_pct: float = CPU_OVERLOAD_PCT,
        clock: Callable[[], float] = time.perf_counter,
        own_cpu: Callable[[], OwnCpu | None] | None = None,
        machine_cpu: Callable[[], MachineCpu | None] | None = None,
        run_wait: Callable[[], float | None] | None = None,
    ) -> None:
        self.monitor = monitor
        self.lag_threshold_ms = lag_threshold_ms
        self.cpu_threshold_pct = cpu_threshold_pct
        self.clock = clock
        self.window_s = float(getattr(monitor, "window_s", LAG_WINDOW_S))
        self.own_cpu = own_cpu if own_cpu is not None else ProcessTreeCpu(pid, clock)
        self.machine_cpu = machine_cpu if machine_cpu is not None else MachineCpuReader()
        if run_wait is None:
            run_wait = RunQueueWait(lambda: getattr(monitor, "thread_id", None), pid, clock)
        self.run_wait = run_wait
        self._recent: deque[Reading] = deque(maxlen=256)
        self._last_status: float | None = None

    def status(self) -> ClientHealthSample:
        """The current verdict, with a one-line operator warning when timings are suspect."""
        now = self.clock()
        own = self.own_cpu()
        machine = self.machine_cpu()
        wait = self.run_wait()
        view = machine_view(own, machine) if machine is not None else None
        self._recent.append(Reading(now, own, view, wait))
        while self._recent and self._recent[0].t < now - self.window_s:
            self._recent.popleft()
        lag = self.monitor.lag_ms() if self.monitor is not None else None
        lag_p99 = lag.p99_ms if lag is not None and lag.n else None
        lag_max = lag.max_ms if lag is not None and lag.n else None
        cause, reason = verdict(
            lag_p99,
            list(self._recent),
            lag_threshold_ms=self.lag_threshold_ms,
            cpu_threshold_pct=self.cpu_threshold_pct,
            in_workers=bool(getattr(self.monitor, "in_workers", False)),
        )
        since, self._last_status = self._last_status, now
        return ClientHealthSample(
            cpu_pct=own.total_pct if own is not None else None,
            loop_lag_ms=lag_p99,
            overloaded=bool(cause),
            reason=reason,
            loop_lag_max_ms=lag_max,
            busiest_cpu_pct=own.busiest_pct if own is not None else None,
            cause=cause,
            loop_cpu_pct=own.loop_pct if own is not None else None,
            machine_cpu_pct=machine.busy_pct if machine is not None else None,
            others_cpu_pct=view.others_pct if view is not None else None,
            steal_pct=machine.steal_pct if machine is not None else None,
            iowait_pct=machine.iowait_pct if machine is not None else None,
            loop_run_wait_ms=wait,
            suspect=self._suspect(cause, lag_p99, since, now),
        )

    def _suspect(self, cause: str, lag_p99: float | None, since: float | None, now: float) -> bool | None:
        """Were timings suspect since the last status() (about a second), not only somewhere
        in the window? The verdict reads the lag's p99 over LAG_WINDOW_S so that its warning
        holds steady; one stall stays in that p99 for the whole window. A second is suspect
        when the verdict says so and, if it rests on the lag, the loop lagged over the
        threshold in that second itself. None: the monitor cannot say (as `overloaded`)."""
        if not cause:
            return False
        if lag_p99 is None or lag_p99 <= self.lag_threshold_ms:
            return True  # a saturated loop, read now
        max_since = getattr(self.monitor, "max_since", None)
        if max_since is None:
            return None
        return max_since(now - LAG_WINDOW_S if since is None else since) > self.lag_threshold_ms
