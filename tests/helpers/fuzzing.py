"""Property tests (hypothesis): how many examples a fuzzer runs under each profile."""

from __future__ import annotations


# -- property tests (hypothesis) ---------------------------------------------------------------
def examples(n: int) -> int:
    """How many examples a fuzzer written for `n` runs: `n` under the `thorough` hypothesis
    profile, else (the `ci` profile, the default: tests/conftest.py) a quarter of it, at least
    hypothesis' own default of 100 and never more than `n`."""
    from hypothesis import settings

    current = getattr(settings, "get_current_profile_name", lambda: getattr(settings, "_current_profile", None))()
    if current == "thorough":
        return n
    return min(n, max(100, n // 4))
