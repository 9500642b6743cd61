"""A big rise of C in one process: how long after its stamped send time each request's bytes leave.

    python benchmarks/send_burst.py [--from 8] [--to 1024] [--batch 8,100000] [--repeat 1]

One engine process (lean transport, kernel-stamped reads) holds C=--from against the sim
(paced: a decode step of 20 ms + 0.02 ms per running request, no caps), then C jumps to --to.
A request's send time (`t_send`, where TTFT and E2E start) is stamped when its task first runs,
as bench_serving stamps before its POST; its bytes are handed to the socket a few loop turns
later (connect, then write). For each new request this prints:

  write - t_send     the client's own delay (the first write of each request is stamped here by
                     wrapping the transport's write; sends and writes are matched in order, both
                     first-in first-out)
  arrival - t_send   the delay the sim saw (its handler's start, wall clock): the client's delay
                     plus the sim's own (on a 2-core machine it accepts ~1000 connections on the
                     same cores)
  last write         when the last new request's bytes left, after the jump

--batch runs each value of the closed loop's batch (engine/constants.py SEND_BATCH: requests
started per loop turn; 100000 is the old behaviour, all at once), interleaved --repeat times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIM = ("decode_base_s=0.02", "decode_per_seq_s=0.00002", "max_running_requests=100000",
       "kv_budget_tokens=1000000000", "ceiling_tok_s=none", "prefill_per_token_s=0")


def one_run(url: str, c0: int, c1: int, batch: int) -> dict:
    import httpx

    from redline.engine.client import kstamp
    from redline.engine.core.config import EngineConfig
    from redline.engine.core.engine import Engine
    from redline.engine.host import new_event_loop
    from redline.engine.load.holder import controller
    from redline.engine.workload.prompts import WorkloadConfig

    controller.SEND_BATCH = batch
    writes: list[float] = []
    write = kstamp.RawTransport.write

    def stamped_write(self, data) -> None:  # type: ignore[no-untyped-def]
        if bytes(data[:5]) == b"POST ":
            writes.append(time.perf_counter())
        write(self, data)

    kstamp.RawTransport.write = stamped_write  # type: ignore[method-assign]

    async def go() -> tuple[float, float, list[float]]:
        cfg = EngineConfig(url=url, concurrency=c0, max_concurrency=max(4096, c1), transport="lean",
                           workload=WorkloadConfig(input_len=32, output_len=64), telemetry=False, calibrate=False)
        e = Engine(cfg)
        await e.start()
        await asyncio.sleep(2)
        wall, t0 = time.time(), time.perf_counter()
        e.set_concurrency(c1)
        sends: dict[int, float] = {}
        end = t0 + 3
        while time.perf_counter() < end:  # each request lasts > 1.3 s: none is missed
            for rid, rec in list(e.targets.sender.in_flight.items()):
                if rec.t_send >= t0:
                    sends[rid] = rec.t_send
            await asyncio.sleep(0.005)
        await e.stop()
        return wall, t0, sorted(sends.values())

    loop = new_event_loop()
    try:
        wall, t0, sends = loop.run_until_complete(go())
    finally:
        loop.close()
        kstamp.RawTransport.write = write  # type: ignore[method-assign]
    n = c1 - c0
    arrivals = sorted(r["t_arrive"] - wall for r in httpx.get(f"{url}/sim/requests", timeout=30).json() if r["t_arrive"] >= wall)
    sends = [s - t0 for s in sends[:n]]
    outs = sorted(w - t0 for w in writes if w >= t0)[:n]
    return {"client": sorted(w - s for w, s in zip(outs, sends, strict=False)),
            "seen": sorted(a - s for a, s in zip(arrivals[:n], sends, strict=False)),
            "last_write": outs[-1] if outs else float("nan")}


def q(xs: list[float], p: float) -> float:
    """The p-quantile of sorted seconds, in ms (the engine's: linear, numpy's default)."""
    from redline.engine.measure.log_bins import quantile

    return 1000 * (quantile(xs, p) or 0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="c0", type=int, default=8)
    p.add_argument("--to", dest="c1", type=int, default=1024)
    p.add_argument("--batch", default="8,100000", help="comma-separated SEND_BATCH values (default: 8,100000)")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    from _bench import machine, sim, table

    batches = [int(b) for b in args.batch.split(",")]
    print(f"# C {args.c0} -> {args.c1} in one process, sim {' '.join(SIM)} ({machine()})")
    rows = []
    for _ in range(args.repeat):
        for b in batches:
            with sim(settings=SIM) as srv:  # a fresh sim each run: its request log holds this run only
                r = one_run(srv.url, args.c0, args.c1, b)
            c, s = r["client"], r["seen"]
            rows.append((b, f"{q(c, .5):.0f}", f"{q(c, .9):.0f}", f"{1000 * c[-1]:.0f}", f"{q(s, .5):.0f}",
                         f"{1000 * s[-1]:.0f}", f"{1000 * r['last_write']:.0f}"))
            print(f"  batch {b}: write - t_send p50 {rows[-1][1]} ms, max {rows[-1][3]} ms; last write at {rows[-1][6]} ms", flush=True)
    print()
    print(table(("batch", "write - t_send p50 ms", "p90", "max", "arrival - t_send p50 ms", "max", "last write ms"), rows))


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
