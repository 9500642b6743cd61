"""The one-line usage error, shared by every command (the exit codes: tui/exits.py)."""


class UsageError(Exception):
    """Bad input; printed as one line, exit 2."""
