"""The garbage collector beside a load: what lived a second leaves the collector's walks.

CPython's cyclic collector walks every tracked object of the generation it collects, and a full
collection walks the whole heap. In a process that holds load, the heap is the modules, the
requests in flight and the ended ones a step may still ask about; a full collection comes about
every ten seconds, and the loop stamps nothing while it runs. At C=1024 over two load workers
against benchmarks/lockstep_server.c (benchmarks/scale_gap.py), each one held a worker's loop
22-33 ms (45-90 ms while httpx's response cycle still fed it, engine/client/request.py
`_unbind`): a send stamped that late carries it in its TTFT, and the client's health rightly
called those seconds suspect, so the step read client-limited.

``HeapKeeper.tick(now, idle)``, called from the loop at least once a second, moves every live
object to the permanent generation once every FREEZE_S (gc.freeze: a list splice, O(1)). The
collector's walks then cover what was made since, a second's worth: young cycles (a failed
request's exception and its frames) are still collected as they die, and every object is still
freed by its reference count. Cycles among objects older than FREEZE_S wait for ``reclaim``:
a full collection of the whole heap, run where no figure can carry it, when the process holds
no request (`idle`: its load paused and empty) and once each such pause, and when the engine
stops (``stop``, the last thing Engine.stop does: the log is complete by then). A load worker's
process simply ends.

The engine's own process ticks from its second (engine/core/ticker.py), a load worker from its
flusher (engine/load/worker.py). ``freeze_heap`` is the one-off freeze of the engine's own
process (engine/host.py): once started, and once stopped, right before the process ends.
"""

from __future__ import annotations

import gc
from typing import Protocol

__all__ = ["FREEZE_S", "HeapKeeper", "freeze_heap"]

FREEZE_S = 1.0  # objects alive this long leave the collector's walks


def freeze_heap() -> None:
    """Leave every object alive now out of later garbage collections (gc.freeze).

    The engine's own process calls it twice. After start-up: the modules, the config and the
    started engine (~35k objects) never become garbage, yet every full collection during the
    run walked them all. And once the engine has stopped, right before the process ends: the
    interpreter's final collections walked the whole heap again, 0.10-0.14 s of CPU after a
    C=256 run on this 2-core VM, against 0.02 s with the heap frozen. Objects are still freed
    by their reference counts as before; only cycles among frozen objects wait for the exit.
    """
    gc.freeze()


class _Collector(Protocol):
    def freeze(self) -> None: ...
    def unfreeze(self) -> None: ...
    def collect(self, generation: int = 2) -> int: ...


class HeapKeeper:
    """Freezes the heap every FREEZE_S while the load runs, and reclaims what froze once the
    load stops. `collector`: the gc module (a test's fake)."""

    def __init__(self, collector: _Collector = gc, freeze_s: float = FREEZE_S) -> None:
        self.gc = collector
        self.freeze_s = freeze_s
        self._frozen_at: float | None = None
        self._held_since_reclaim = False  # something froze while the load ran, since the last reclaim
        self.reclaims = 0

    def tick(self, now: float, idle: bool = False) -> None:
        """From the loop, at least once a second. `idle`: the process holds no request now and
        sends none (its load paused and empty)."""
        if idle:
            if self._held_since_reclaim:
                self.reclaim()
            return
        if self._frozen_at is None or now - self._frozen_at >= self.freeze_s:
            self.gc.freeze()
            self._frozen_at = now
            self._held_since_reclaim = True

    def stop(self) -> None:
        """The engine has stopped: reclaim what froze while it ran, so that a
        process that goes on (a test, a script that embeds the engine) keeps no old cycle."""
        if self._held_since_reclaim:
            self.reclaim(refreeze=False)
        self._frozen_at = None

    def reclaim(self, refreeze: bool = True) -> None:
        """One full collection of everything, the frozen objects too; then freeze again (the
        modules and what is left live on), unless the load is over."""
        self.gc.unfreeze()
        self.gc.collect()
        if refreeze:
            self.gc.freeze()
        self._held_since_reclaim = False
        self.reclaims += 1
