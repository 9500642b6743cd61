"""Session spool and export benchmark: `python benchmarks/export_bench.py [N_ROWS]`.

Writes N request rows (default 1,000,000) through SessionWriter into a temporary session,
then times read_table and the export to each format.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def _rows(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"N_ROWS {s!r}: expected a whole number >= 1")
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0].split(": ")[0] + ": write N request rows, "
                                 "then time read_table and the export to parquet, csv and ndjson (a temporary folder)")
    ap.add_argument("n_rows", nargs="?", type=_rows, default=1_000_000, metavar="N_ROWS", help="request rows (default 1000000)")
    bench(ap.parse_args(argv).n_rows)


def bench(n: int) -> None:
    from redline.engine.report.export import export_session, read_table
    from redline.engine.session import SessionWriter
    from redline.engine.session.paths import table_path

    tmp = Path(tempfile.mkdtemp(prefix="redline-bench-"))
    try:
        w = SessionWriter(tmp / "s", {"label": "bench"})
        row = {
            "rid": 0, "phase": "measure", "step": 0, "concurrency": 64, "t_send": 0.0,
            "ttft_ms": 0.0, "e2e_ms": 0.0, "itl_mean_ms": 6.123, "itl_max_ms": 41.5,
            "tpot_ms": 6.2, "input_tokens": 1024, "output_tokens": 2048, "chunks": 2047,
            "status": "ok", "http_status": 200, "error_kind": "", "error_text": "",
        }
        t0 = time.perf_counter()
        for i in range(n):
            row["rid"] = i
            row["t_send"] = 1.7e9 + i * 0.001
            row["ttft_ms"] = 50.0 + (i % 97) * 1.37
            row["e2e_ms"] = 8000.0 + (i % 1013) * 3.1
            w.add_request(row)
        w.close("bench")
        write_s = time.perf_counter() - t0
        size = table_path(tmp / "s", "requests").stat().st_size
        print(f"write   {n} rows  {write_s:.2f} s  ({write_s / n * 1e6:.2f} us/row incl. flushes)"
              f"  requests.ndjson {size / 1e6:.1f} MB")
        t0 = time.perf_counter()
        df = read_table(tmp / "s", "requests")
        print(f"read    {df.height} rows  {time.perf_counter() - t0:.2f} s")
        for fmt in ("parquet", "csv", "ndjson"):
            t0 = time.perf_counter()
            paths = export_session(tmp / "s", fmt, tmp / "out")
            dt = time.perf_counter() - t0
            print(f"export  {fmt:<8} {dt:.2f} s  requests.{fmt} {paths[0].stat().st_size / 1e6:.1f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from _bench import run_main

    run_main(main)
