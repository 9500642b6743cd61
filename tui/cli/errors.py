"""Exit codes and the one-line usage error, shared by every command."""

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_GATE_FAILED = 4  # a --gate / [gate] condition failed (engine/report/gate.py)
# the run ended and its session is saved, but the log could not keep every row (a write or
# fsync error: "session saved, N rows lost: REASON"); a signal's 128 + N and a failed gate's 4
# take precedence, the line is printed all the same
EXIT_ROWS_LOST = 5


class UsageError(Exception):
    """Bad input; printed as one line, exit 2."""
