"""Exit codes and the one-line usage error, shared by every command."""

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_GATE_FAILED = 4  # a --gate / [gate] condition failed (engine/report/gate.py)


class UsageError(Exception):
    """Bad input; printed as one line, exit 2."""
