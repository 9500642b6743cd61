"""Write the example Mooncake trace shipped with redline (presets/traces/example.jsonl).

    python benchmarks/make_trace.py [--out PATH] [--rows 120] [--seconds 60] [--groups 5] [--seed 16]

A synthetic trace in the Mooncake format, one request a line:

    {"timestamp": MS, "input_length": N, "output_length": N, "hash_ids": [ID, ...]}

  arrivals   a Poisson process (exponential gaps), scaled so the last row is at --seconds
  lengths    input_length 100..1500 tokens, output_length 16..256
  hash_ids   ceil(input_length / 512) block ids a row; ids not shared are fresh
  groups     --groups "conversations" (about 70 % of the rows): each has a shared prefix of
             1 or 2 blocks that every row of it starts with (so a prefix cache hits), then
             blocks of the row's own; the other rows share nothing

The same arguments write the same bytes (the seed fixes everything). Prints where it wrote.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 512  # tokens of one Mooncake hash block
IN_MIN, IN_MAX = 100, 1500
OUT_MIN, OUT_MAX = 16, 256
GROUPED = 0.7  # share of rows in a conversation group


def make_rows(rows: int, seconds: float, groups: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    next_id = 0

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    # each group: its shared leading blocks (1 or 2, both kinds present)
    prefixes = [fresh(1 + g % 2) for g in range(groups)]

    gaps = [rng.expovariate(1.0) for _ in range(rows - 1)]
    scale = seconds * 1000.0 / sum(gaps) if gaps else 0.0
    t = 0.0
    stamps = [0]
    for g in gaps:
        t += g * scale
        stamps.append(round(t))

    out = []
    for ts in stamps:
        group = rng.randrange(groups) if groups and rng.random() < GROUPED else None
        if group is None:
            input_length = rng.randint(IN_MIN, IN_MAX)
            shared: list[int] = []
        else:
            shared = prefixes[group]
            # long enough to hold the whole shared prefix and some text of its own
            input_length = rng.randint(len(shared) * BLOCK + 20, IN_MAX)
        blocks = -(-input_length // BLOCK)
        hash_ids = shared + fresh(blocks - len(shared))
        out.append({"timestamp": ts, "input_length": input_length,
                    "output_length": rng.randint(OUT_MIN, OUT_MAX), "hash_ids": hash_ids})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "presets" / "traces" / "example.jsonl")
    ap.add_argument("--rows", type=int, default=120)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args(argv)
    if args.rows < 1 or args.seconds < 0 or args.groups < 0:
        ap.error("--rows must be >= 1, --seconds and --groups >= 0")
    rows = make_rows(args.rows, args.seconds, args.groups, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    grouped = sum(1 for r in rows if r["hash_ids"][0] < _prefix_ids(args.groups))
    print(f"wrote {args.out}: {len(rows)} rows over {rows[-1]['timestamp'] / 1000:.1f} s, "
          f"{grouped} in {args.groups} shared-prefix groups (seed {args.seed})")
    return 0


def _prefix_ids(groups: int) -> int:
    """How many ids the groups' shared prefixes take (ids 0 .. this - 1)."""
    return sum(1 + g % 2 for g in range(groups))


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
