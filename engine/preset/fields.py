"""Checking one value of a preset: typed getters that raise a one-line PresetError.

Every message has the form `FILE: KEY: expected WHAT, got VALUE`, e.g.

    presets/x.toml: [ramp].concurrency: expected a non-empty list of positive integers, got []

`Ctx` carries the file name; parse.py calls one getter per key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..workload.prompts import FILE_FORMS, PREFIX_FORM, PrefixSpecError, is_prefix_spec, parse_prefix_spec
from .spec import MAX_SECONDS, PresetError, one_line

DATASET_FORMS = FILE_FORMS


def show(value: Any, limit: int = 60) -> str:
    """A short one-line repr of a user value for an error message."""
    try:
        text = repr(value)
    except Exception:  # pragma: no cover - TOML values always repr
        text = f"<{type(value).__name__}>"
    text = one_line(text)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def num(x: float) -> str:
    """A number as a person writes it: 60 not 60.0, 0.05 not 5e-02."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


def has_control(s: str) -> bool:
    return any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in s)


def key_name(key: Any) -> str:
    """A TOML key as an error message shows it: bare when it is a plain word, else repr."""
    text = str(key)
    if text and all(ch.isalnum() or ch in "_-" for ch in text) and text.isascii():
        return text
    return show(text)


class Ctx:
    """Error context (the source file) and the typed getters for one preset."""

    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, key: str, message: str) -> PresetError:
        where = f"{key}: " if key else ""
        return PresetError(f"{self.source}: {where}{message}")

    def bad(self, key: str, expected: str, value: Any) -> PresetError:
        return self.err(key, f"expected {expected}, got {show(value)}")

    def integer(self, key: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        if maximum is not None:
            what = f"an integer {minimum}..{maximum}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(key, what, value)
        if value < minimum or (maximum is not None and value > maximum):
            raise self.bad(key, what, value)
        return value

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.bad(key, "true or false", value)
        return value

    def number(
        self,
        key: str,
        value: Any,
        *,
        lo: float,
        hi: float,
        lo_open: bool,
        hi_open: bool = False,
        what: str,
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.bad(key, what, value)
        x = float(value)
        if not math.isfinite(x):
            raise self.bad(key, what, value)
        if (x <= lo if lo_open else x < lo) or (x >= hi if hi_open else x > hi):
            raise self.bad(key, what, value)
        return x

    def seconds(self, key: str, value: Any, *, zero_ok: bool) -> float:
        what = (
            f"a number of seconds 0..{num(MAX_SECONDS)}"
            if zero_ok
            else f"a number of seconds > 0 (at most {num(MAX_SECONDS)})"
        )
        return self.number(key, value, lo=0.0, hi=MAX_SECONDS, lo_open=not zero_ok, what=what)

    def string(self, key: str, value: Any, what: str = "a non-empty one-line string") -> str:
        if not isinstance(value, str) or not value.strip() or has_control(value):
            raise self.bad(key, what, value)
        return value

    def url(self, key: str, value: Any) -> str:
        """A target URL, normalised, by the one validator --url uses too (engine/client/target.py)."""
        # imported here: target.py brings httpx, which a preset without a URL never needs
        from ..client.target import URL_FORMS, BadURL, validate_url

        try:
            return validate_url(value)
        except BadURL as exc:
            # exc.url, not value: a URL with a password in it is shown with the password masked
            raise self.err(key, f"expected {URL_FORMS}, got {show(exc.url)} ({exc.reason})") from None

    def dataset(self, key: str, value: Any, base: Path) -> str:
        """`random`, `prefix:groups=G,prefix_len=P,suffix_len=S` (checked by the one parser
        --dataset uses), or `sharegpt:PATH` / `jsonl:PATH` made absolute (relative to `base`);
        the file must exist."""
        if not isinstance(value, str) or has_control(value):
            raise self._bad_dataset(key, value)
        if value == "random":
            return value
        if is_prefix_spec(value):
            try:
                parse_prefix_spec(value)
            except PrefixSpecError as exc:
                raise self.err(key, f"{exc.reason} in {show(value)} (expected {PREFIX_FORM}, each a whole number >= 1)") from None
            return value
        kind, sep, raw = value.partition(":")
        if not sep or kind not in ("sharegpt", "jsonl") or not raw.strip():
            raise self._bad_dataset(key, value)
        try:
            path = Path(raw).expanduser()
            if not path.is_absolute():
                path = base / path
            path = path.resolve()
            ok = path.is_file()
        except (OSError, ValueError, RuntimeError):
            ok = False
            path = Path(raw)
        if not ok:
            raise self.err(key, f"dataset file not found: {show(str(path), 200)} (expected {DATASET_FORMS})")
        return f"{kind}:{path}"

    def _bad_dataset(self, key: str, value: Any) -> PresetError:
        return self.err(key, f"expected {DATASET_FORMS}, got {show(value)} (or {PREFIX_FORM})")
