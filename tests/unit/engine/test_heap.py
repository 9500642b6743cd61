"""The collector beside a load (engine/heap.py): every FREEZE_S what lives leaves the collector's
walks, so a full collection walks a second's objects, not the heap; young cycles are still
collected; what froze is reclaimed, once, when the load stops."""

from __future__ import annotations

import gc
import weakref

from redline.engine.heap import FREEZE_S, HeapKeeper


class FakeGc:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")

    def collect(self, generation: int = 2) -> int:
        self.calls.append(f"collect{generation}")
        return 0


def test_it_freezes_once_a_freeze_interval_while_the_load_runs():
    fake = FakeGc()
    k = HeapKeeper(fake)
    for t in (0.0, 0.4, 0.99, 1.0, 1.5, 2.2, 2.3):
        k.tick(t)
    assert fake.calls == ["freeze"] * 3  # at 0, 1.0 and 2.2
    assert FREEZE_S == 1.0


def test_what_froze_is_reclaimed_once_each_time_the_load_stops():
    fake = FakeGc()
    k = HeapKeeper(fake)
    k.tick(0.0, idle=True)  # nothing froze yet: nothing to reclaim
    assert fake.calls == []
    k.tick(1.0)
    k.tick(2.0, idle=True)
    k.tick(3.0, idle=True)  # still idle: reclaimed already
    assert fake.calls == ["freeze", "unfreeze", "collect2", "freeze"]
    k.tick(4.0)  # the load again
    k.tick(5.0, idle=True)
    assert fake.calls[-4:] == ["freeze", "unfreeze", "collect2", "freeze"]
    assert k.reclaims == 2


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_a_full_collection_walks_only_what_was_made_since_and_the_reclaim_frees_old_cycles():
    gc.collect()
    k = HeapKeeper()
    try:
        old = Node()
        gone_old = weakref.ref(old)
        del old
        k.tick(100.0)  # the old cycle froze before anyone collected it
        assert len(gc.get_objects(generation=2)) < 100  # the heap left the walks
        young = Node()
        gone_young = weakref.ref(young)
        del young
        gc.collect()
        assert gone_young() is None  # a cycle made since the freeze is collected as always
        assert gone_old() is not None  # the frozen one waits...
        k.tick(101.0, idle=True)
        assert gone_old() is None  # ...for the reclaim, when the load stopped
        assert gc.get_freeze_count() > 1000  # and the heap is frozen again
    finally:
        gc.unfreeze()


def test_the_engines_stop_reclaims_and_leaves_the_collector_as_it_found_it():
    fake = FakeGc()
    k = HeapKeeper(fake)
    k.stop()  # nothing froze: nothing to do
    assert fake.calls == []
    k.tick(0.0)
    k.stop()
    assert fake.calls == ["freeze", "unfreeze", "collect2"]  # not frozen again: the process goes on
    k.stop()
    assert fake.calls == ["freeze", "unfreeze", "collect2"]

