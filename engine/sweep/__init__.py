"""`redline sweep`: a preset run against each server configuration of a grid in turn, each
server launched, waited for and stopped by redline, and one comparison of them all
(`OUT/sweep.json`, `redline report OUT`). docs/sweep.md tells the whole story.

    spec.py         the configurations: --serve, --grid, --url, a [sweep] table; checked first
    server_proc.py  one server: its own process group, its log, readiness, a whole-group stop
    runner.py       the sweep: each configuration in turn, its preset run by the caller
    sweep_file.py   OUT/sweep.json, written after each configuration
"""
