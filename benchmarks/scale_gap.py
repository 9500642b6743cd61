"""Issue 47's "done when", in one command: redline's p99 ITL against an independent compiled
server's p99 write gap at C=1024 and 2048, with redline's defaults (`--workers auto`).

    python benchmarks/scale_gap.py [--concurrency 1024,2048] [--seconds 15] [--repeat 1]
                                   [--modes headless] [--pace 40] [--output-len 64]

The server is benchmarks/lockstep_server.c (C, built when missing): every running request gets
a token every 40 ms (--pace), written in one burst per step, each write stamped; outputs of 64
tokens (--output-len), on the same machine (2 cores here, shared with it). redline runs as
`redline --url SERVER --concurrency C --output-len 64` would: its own choice of workers (the
notice of it is printed), kernel stamps, the C road where built. The runs are itl_gap.py's
(benchmarks/itl_gap.py run_set: the same window on both sides, the engine's own ITL feed, its
summary.json); per run the last lines give:

  p99 ITL - p99 write gap   goal: within 2 ms
  steps client-limited      goal: none (summary.json's live step, client_limited)
  coalesced_chunks          the live step's share of chunks read coalesced (left out of ITL)
  load processes            what --workers auto picked

and the machine's load average beside each (a busy neighbour makes every figure worse).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GOAL_MS = 2.0


def main() -> int:
    import itl_gap

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    itl_gap.add_arguments(p)
    p.set_defaults(concurrency="1024,2048", server="compiled", pace="40", output_len=64, workers="auto", modes="headless",
                   seconds=15.0, warmup=5.0)
    args = p.parse_args()
    from _bench import machine

    print(f"# issue 47: redline's p99 ITL vs the compiled server's p99 write gap, --workers {args.workers} ({machine()})")
    print(f"# server: {args.server}, a token every {args.pace} ms to every stream, {args.output_len}-token outputs; "
          f"{args.warmup:g} s warm-up + {args.seconds:g} s measured; load average {os.getloadavg()[0]:.2f} at the start")
    rows = itl_gap.run_set(args)
    print()
    met = True
    for r in rows:
        diff, limited = r["diff"], r["client_limited"]
        ok = diff is not None and abs(diff) <= GOAL_MS and limited == 0
        met = met and ok
        print(f"C={r['c']} {r['mode']}: {r['processes']} load process(es); p99 ITL {itl_gap._f(r['itl_p99'])} ms vs the server's "
              f"p99 write gap {itl_gap._f(r['gap_p99'])} ms: {itl_gap._f(diff)} ms (goal within {GOAL_MS:g}); steps client-limited "
              f"{limited} of {r['steps']} (goal 0); coalesced_chunks {itl_gap._f(r['coalesced'], 4)}; load average "
              f"{r['load_avg']:.2f}: {'met' if ok else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
