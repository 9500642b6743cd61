"""The client-health warning names the cause it measured, and clears when the cause is gone.

Lag, redline's own CPU and the machine's CPU are injected (fake readers, a fake clock): the
verdicts are deterministic. One test stalls a real loop with a real blocking call.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

from redline.engine.telemetry.client_health import (
    LAG_OVERLOAD_MS,
    LOOP_BUSY_PCT,
    ClientHealth,
    LagStats,
    LoopLagMonitor,
    MachineCpu,
    OwnCpu,
    ProcessTreeCpu,
    RunQueueWait,
)


class Rig:
    """A ClientHealth whose lag, own CPU, machine CPU and clock the test sets."""

    def __init__(self, ncpu: int = 2) -> None:
        self.now = 1000.0
        self.lag = LagStats(0.0, 0.0, 0)
        self.own: OwnCpu | None = OwnCpu(2.0, 2.0, 2.0)
        self.ncpu = ncpu
        self.machine: MachineCpu | None = MachineCpu(5.0, 0.0, 0.0, ncpu)
        self.wait: float | None = None  # the loop thread's run-queue wait: unknown (not Linux)
        self.health = ClientHealth(
            self,
            clock=lambda: self.now,
            own_cpu=lambda: self.own,
            machine_cpu=lambda: self.machine,
            run_wait=lambda: self.wait,
        )

    window_s = 5.0  # the lag window the rig's lag stands for

    def lag_ms(self) -> LagStats:
        return self.lag

    def set(
        self,
        *,
        lag: float | None = None,
        loop: float | None = None,
        tree: float | None = None,
        machine: float | None = None,
        steal: float = 0.0,
        iowait: float = 0.0,
        wait: float | None = None,
    ) -> None:
        if wait is not None:
            self.wait = wait
        if lag is not None:
            self.lag = LagStats(lag, lag * 1.5, 100)
        if loop is not None:
            self.own = OwnCpu(tree if tree is not None else loop, loop, max(loop, (tree or loop) - loop))
        if machine is not None:
            self.machine = MachineCpu(machine, steal, iowait, self.ncpu)

    def second(self, **kw):
        """One second passes; status() as the engine calls it."""
        self.set(**kw)
        self.now += 1.0
        return self.health.status()

    def quiet(self, seconds: int = 6, **kw):
        """Seconds of the given state (longer than the window: older readings are gone)."""
        s = None
        for _ in range(seconds):
            s = self.second(**kw)
        return s


def silent(s) -> bool:
    return not s.overloaded and s.cause == "" and s.reason == ""


def test_idle_client_on_a_busy_machine_is_silent():
    rig = Rig(ncpu=2)
    # other processes fill both CPUs, the hypervisor steals, the disk is busy: the loop is fine
    s = rig.quiet(lag=3.0, loop=2.0, machine=195.0, steal=20.0, iowait=40.0)
    assert silent(s)
    assert s.machine_cpu_pct == 195.0 and s.steal_pct == 20.0 and s.others_cpu_pct == 193.0
    # just under the lag threshold: still nothing to say
    assert silent(rig.second(lag=LAG_OVERLOAD_MS))


def test_loop_stalled_with_little_cpu_names_disk_or_machine():
    rig = Rig(ncpu=4)
    rig.quiet(lag=2.0, loop=2.0, machine=20.0)
    s = rig.second(lag=32.0)
    assert s.overloaded and s.cause == "loop_blocked"
    assert s.reason == (
        "loop stalled: event-loop lag 32 ms with redline at 2 % CPU — disk or machine; "
        "latencies may be inflated"
    )
    assert "client overloaded" not in s.reason and "redline itself" not in s.reason
    # with the machine waiting on disk, the warning says so
    s = rig.second(machine=20.0, iowait=30.0)
    assert s.cause == "loop_blocked"
    assert s.reason.startswith("loop stalled: event-loop lag 32 ms with redline at 2 % CPU, machine iowait 30 %")


def test_own_cpu_saturated_is_client_overloaded():
    rig = Rig(ncpu=4)
    s = rig.second(lag=5.0, loop=97.0, machine=110.0)
    assert s.overloaded and s.cause == "client_cpu"
    assert s.reason == "client overloaded: redline's loop at 97 % CPU — latencies inflated by redline itself"
    s = rig.second(lag=45.0)
    assert s.cause == "client_cpu"
    assert s.reason == (
        "client overloaded: redline's loop at 97 % CPU, event-loop lag 45 ms — latencies inflated "
        "by redline itself"
    )


def test_loop_busy_with_its_own_work_while_lagging_is_client_overloaded():
    rig = Rig(ncpu=8)
    s = rig.second(lag=40.0, loop=LOOP_BUSY_PCT + 10, machine=70.0)
    assert s.cause == "client_cpu" and s.reason.startswith("client overloaded: redline's loop at 60 % CPU")


def test_machine_busy_with_a_lagging_loop_names_other_processes():
    rig = Rig(ncpu=2)
    s = rig.second(lag=32.0, loop=2.0, tree=2.0, machine=182.0, steal=12.0)
    assert s.overloaded and s.cause == "machine_busy"
    assert s.reason == (
        "machine busy: other processes use 180 % CPU (steal 12 %), event-loop lag 32 ms — timings "
        "may be inflated by other processes"
    )
    assert s.others_cpu_pct == 180.0


def test_steal_alone_makes_the_machine_busy():
    rig = Rig(ncpu=4)
    s = rig.second(lag=30.0, loop=5.0, machine=60.0, steal=15.0)
    assert s.cause == "machine_busy" and "(steal 15 %)" in s.reason


def test_full_machine_of_redlines_own_processes_is_not_other_processes():
    # the --sim child fills a core and the loop lags: not "other processes"
    rig = Rig(ncpu=1)
    s = rig.second(lag=30.0, loop=10.0, tree=95.0, machine=97.0)
    assert s.cause == "loop_blocked" and s.others_cpu_pct == 2.0


def test_a_busy_child_is_not_the_loop():
    # a child of redline (the --sim server) at 100 %, the loop itself idle and on time
    rig = Rig(ncpu=4)
    s = rig.second(lag=2.0, loop=3.0, tree=103.0, machine=110.0)
    assert silent(s) and s.busiest_cpu_pct == 100.0 and s.loop_cpu_pct == 3.0 and s.cpu_pct == 103.0


def test_warnings_clear_when_the_cause_is_gone():
    rig = Rig(ncpu=2)
    assert rig.second(lag=5.0, loop=97.0).cause == "client_cpu"
    assert silent(rig.second(lag=5.0, loop=3.0))  # a core no longer saturated: gone at once
    rig.quiet(lag=5.0, loop=3.0, machine=10.0)
    assert rig.second(lag=32.0, machine=190.0).cause == "machine_busy"
    assert silent(rig.second(lag=4.0))  # the lag is back under the threshold: gone at once
    assert silent(rig.second(lag=4.0, machine=190.0))  # the machine stays busy: nothing to say
    rig.quiet(lag=4.0, machine=10.0)
    assert rig.second(lag=32.0).cause == "loop_blocked"
    assert silent(rig.second(lag=4.0))


def test_a_lag_is_explained_by_the_cpu_over_its_own_window():
    rig = Rig(ncpu=2)
    rig.quiet(lag=2.0, loop=2.0, machine=10.0)
    # a two-second CPU burst of the loop makes it lag; the lag p99 covers the last 5 s
    rig.second(lag=60.0, loop=99.0, machine=110.0)
    rig.second(loop=99.0, machine=110.0)
    s = rig.second(loop=2.0, machine=10.0)  # the burst is over, the lag window still holds it
    assert s.cause == "client_cpu" and "redline's loop at 99 % CPU, event-loop lag 60 ms" in s.reason
    # ... while other processes' burst explains a lag in the same window
    rig.quiet(lag=2.0, loop=2.0, machine=10.0)
    rig.second(lag=50.0, loop=2.0, machine=195.0)
    s = rig.second(loop=2.0, machine=10.0)
    assert s.cause == "machine_busy" and "other processes use 193 % CPU" in s.reason
    # a lag that outlives its cause's readings is no longer put on it
    s = rig.quiet(seconds=6, lag=50.0, loop=2.0, machine=10.0)
    assert s.cause == "loop_blocked"


def test_unknown_cpu_still_reports_a_stall():
    rig = Rig()
    rig.own = None
    rig.machine = None
    s = rig.second(lag=40.0)
    assert s.cause == "loop_blocked" and s.reason.startswith("loop stalled: event-loop lag 40 ms with redline's CPU unknown")
    assert s.cpu_pct is None and s.machine_cpu_pct is None


async def test_real_blocking_call_in_the_loop_is_loop_blocked():
    """A real loop held by a real blocking call (as a disk write on the loop would)."""
    monitor = LoopLagMonitor(interval_s=0.02)
    idle_machine = MachineCpu(busy_pct=5.0, steal_pct=0.0, iowait_pct=0.0, ncpu=4)
    own = ProcessTreeCpu()  # real: this process's CPU
    health = ClientHealth(monitor, own_cpu=own, machine_cpu=lambda: idle_machine)
    monitor.start()
    try:
        await asyncio.sleep(0.1)
        assert monitor.thread_id == threading.get_native_id()  # the loop runs on this thread
        assert not health.status().overloaded  # a healthy loop; primes the readers
        for _ in range(3):
            time.sleep(0.2)  # blocks the loop without using CPU
            await asyncio.sleep(0.05)
        s = health.status()
    finally:
        await monitor.stop()
    if sys.platform == "linux":
        assert s.loop_run_wait_ms is not None  # real: read from the loop thread's schedstat
    assert s.overloaded and s.cause == "loop_blocked"
    assert s.loop_lag_ms is not None and s.loop_lag_ms >= 150
    assert s.loop_cpu_pct is not None and s.loop_cpu_pct < LOOP_BUSY_PCT
    assert s.reason.startswith(f"loop stalled: event-loop lag {s.loop_lag_ms:.0f} ms with redline at ")
    assert "disk or machine" in s.reason


# -- with the loop thread's run-queue wait (Linux: /proc/<pid>/task/<tid>/schedstat) ---------
def test_descheduled_loop_on_a_busy_machine_is_machine_busy():
    rig = Rig(ncpu=2)
    # the loop's thread waited 40 ms/s for a CPU while other processes used 180 %
    s = rig.second(lag=32.0, loop=2.0, machine=182.0, wait=40.0)
    assert s.cause == "machine_busy" and s.loop_run_wait_ms == 40.0
    assert s.reason.startswith("machine busy: other processes use 180 % CPU (steal 0 %), event-loop lag 32 ms")


def test_blocking_call_on_a_busy_machine_is_a_stall_not_the_machine():
    """The loop held 200 ms by a call while the machine is busy: its thread hardly waited for
    a CPU, so the machine did not cause the lag."""
    rig = Rig(ncpu=2)
    s = rig.second(lag=200.0, loop=3.0, machine=190.0, wait=6.0)
    assert s.cause == "loop_blocked"
    assert s.reason.startswith("loop stalled: event-loop lag 200 ms with redline at 3 % CPU")
    # the same busy machine with a loop that waited most of its lag for a CPU
    assert rig.second(wait=150.0).cause == "machine_busy"


def test_waiting_for_a_cpu_that_redline_itself_fills_is_not_other_processes():
    rig = Rig(ncpu=1)
    s = rig.second(lag=40.0, loop=20.0, tree=95.0, machine=97.0, wait=60.0)
    assert s.cause == "loop_blocked" and s.others_cpu_pct == 2.0


def test_steal_is_the_machine_whatever_the_wait():
    rig = Rig(ncpu=4)
    assert rig.second(lag=30.0, loop=5.0, machine=40.0, steal=12.0, wait=0.0).cause == "machine_busy"


def test_run_queue_wait_reader():
    tid = [None]
    now = [10.0]
    values = iter([1_000_000.0, 41_000_000.0, 41_000_000.0])

    class Fake(RunQueueWait):
        def _read(self, tid: int) -> float | None:
            return next(values)

    r = Fake(lambda: tid[0], clock=lambda: now[0])
    assert r() is None  # the loop has not started: no thread to read
    tid[0] = 1234
    assert r() is None  # first reading
    now[0] += 0.5
    assert r() == 80.0  # 40 ms waited in 0.5 s
    now[0] += 1.0
    assert r() == 0.0


def test_run_queue_wait_reads_a_real_thread():
    r = RunQueueWait(threading.get_native_id)
    r()
    time.sleep(0.05)
    w = r()
    if w is None:  # no schedstat on this system (not Linux)
        assert not os.path.exists(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/schedstat")
    else:
        assert w >= 0.0


def test_one_stall_makes_its_own_second_suspect_not_the_whole_window():
    """The warning reads the lag's p99 over the window (5 s): early in a run, before the
    window holds 100 wake-ups, that p99 is the worst lag, so one 40 ms start-up stall keeps
    the warning up for seconds, as a warning may; but the timeline row's client_overloaded
    (which makes a step client-limited) is the second the stall happened in, not the ones
    after it: a step that opens after a start-up stall is not flagged for it."""
    from collections import Counter

    from redline.engine.measure.live_metrics import LiveStats
    from redline.engine.measure.timeline import timeline_row

    now = [1000.0]
    mon = LoopLagMonitor(clock=lambda: now[0])
    health = ClientHealth(mon, clock=lambda: now[0], own_cpu=lambda: OwnCpu(5.0, 5.0, 5.0),
                          machine_cpu=lambda: MachineCpu(10.0, 0.0, 0.0, 2), run_wait=lambda: 0.0)
    samples = []
    for second in range(8):
        for k in range(20):  # the monitor's 50 ms sleeps; one wakes 40 ms late in second 1
            t = now[0] + (k + 1) * 0.05
            mon.record(t, 0.040 if (second, k) == (1, 9) else 0.001)
        now[0] += 1.0
        samples.append(health.status())
    assert [s.overloaded for s in samples] == [False, True, True, True, False, False, False, False]
    assert [s.suspect for s in samples] == [False, True, False, False, False, False, False, False]
    rows = [timeline_row(t_wall=0.0, interval_s=1.0, sec=Counter(), stats=LiveStats(), state="running", target_c=8,
                         in_flight=8, backing_off=0, server=None, health=s, gpus=[]) for s in samples]
    assert [r["client_overloaded"] for r in rows] == [False, True, False, False, False, False, False, False]
    assert [r["client_cause"] for r in rows] == ["", "loop_blocked", "", "", "", "", "", ""]
    assert samples[3].cause == "loop_blocked" and samples[3].loop_lag_ms == 40.0  # the warning still holds


def test_a_saturated_loop_is_suspect_in_every_second_it_lasts():
    now = [1000.0]
    mon = LoopLagMonitor(clock=lambda: now[0])
    loop = [99.0]
    health = ClientHealth(mon, clock=lambda: now[0], own_cpu=lambda: OwnCpu(loop[0], loop[0], loop[0]),
                          machine_cpu=lambda: MachineCpu(100.0, 0.0, 0.0, 2), run_wait=lambda: 0.0)
    out = []
    for _second in range(4):
        for k in range(20):
            mon.record(now[0] + (k + 1) * 0.05, 0.030)  # every wake-up late: a saturated loop
        now[0] += 1.0
        out.append(health.status())
    assert all(s.overloaded and s.suspect and s.cause == "client_cpu" for s in out)
