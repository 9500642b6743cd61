"""Exit codes and the one-line usage error, shared by every command."""

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3


class UsageError(Exception):
    """Bad input; printed as one line, exit 2."""
