"""Checking one value of a preset: typed getters that raise a one-line PresetError.

Every message has the form `FILE: KEY: expected WHAT, got VALUE`, e.g.

    presets/x.toml: [ramp].concurrency: expected a non-empty list of positive integers, got []

`Ctx` carries the file name and its folder (where relative paths start); the kinds of keys.py
call one getter per key.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..constants import MAX_SECONDS
from ..text import one_line

__all__ = ["Ctx", "PresetError", "TomlTable", "has_control", "key_name", "num", "show"]

TomlTable = dict[str, object]  # a TOML table as tomllib gives it: each value checked where it is read


class PresetError(ValueError):
    """A preset that cannot be used. str() is one line: file, key, what is accepted."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message, multiline_only=True))


def show(value: object, limit: int = 60) -> str:
    """A short one-line repr of a user value for an error message (a repr has no line break)."""
    try:
        text = repr(value)
    except Exception:  # pragma: no cover - TOML values always repr
        text = f"<{type(value).__name__}>"
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


def key_name(key: object) -> str:
    """A TOML key as an error message shows it: bare when it is a plain word, else repr."""
    text = str(key)
    if text and all(ch.isalnum() or ch in "_-" for ch in text) and text.isascii():
        return text
    return show(text)


class Ctx:
    """Error context (the source file, the folder its relative paths start from) and the typed
    getters for one preset."""

    def __init__(self, source: str, base: Path | None = None) -> None:
        self.source = source
        self.base = base if base is not None else Path.cwd()

    def err(self, key: str, message: str) -> PresetError:
        where = f"{key}: " if key else ""
        return PresetError(f"{self.source}: {where}{message}")

    def bad(self, key: str, expected: str, value: object) -> PresetError:
        return self.err(key, f"expected {expected}, got {show(value)}")

    def integer(self, key: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        if maximum is not None:
            what = f"an integer {minimum}..{maximum}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(key, what, value)
        if value < minimum or (maximum is not None and value > maximum):
            raise self.bad(key, what, value)
        return value

    def boolean(self, key: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise self.bad(key, "true or false", value)
        return value

    def number(
        self,
        key: str,
        value: object,
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

    def seconds(self, key: str, value: object, *, zero_ok: bool) -> float:
        what = (
            f"a number of seconds 0..{num(MAX_SECONDS)}"
            if zero_ok
            else f"a number of seconds > 0 (at most {num(MAX_SECONDS)})"
        )
        return self.number(key, value, lo=0.0, hi=MAX_SECONDS, lo_open=not zero_ok, what=what)

    def string(self, key: str, value: object, what: str = "a non-empty one-line string") -> str:
        if not isinstance(value, str) or not value.strip() or has_control(value):
            raise self.bad(key, what, value)
        return value

    def line(self, key: str, value: object) -> str:
        """A one-line string, "" allowed (a description)."""
        if not isinstance(value, str) or has_control(value):
            raise self.bad(key, "a one-line string", value)
        return value

    def url(self, key: str, value: object) -> str:
        """A target URL, normalised, by the one validator --url uses too (engine/client/target.py)."""
        # imported here: target.py brings httpx, which a preset without a URL never needs
        from ..client.target import URL_FORMS, BadURL, validate_url

        try:
            return validate_url(value)
        except BadURL as exc:
            # exc.url, not value: a URL with a password in it is shown with the password masked
            raise self.err(key, f"expected {URL_FORMS}, got {show(exc.url)} ({exc.reason})") from None

    def dataset(self, key: str, value: object, base: Path | None = None) -> str:
        """`random`, `prefix:groups=G,prefix_len=P,suffix_len=S` (checked by the one parser
        --dataset uses), or `sharegpt:PATH` / `jsonl:PATH` made absolute (relative to `base`,
        else the preset's folder); the file must exist."""
        from ..workload.prompts import FILE_FORMS, PREFIX_FORM, PrefixSpecError, is_prefix_spec, parse_prefix_spec

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
                path = (self.base if base is None else base) / path
            path = path.resolve()
            ok = path.is_file()
        except (OSError, ValueError, RuntimeError):
            ok = False
            path = Path(raw)
        if not ok:
            raise self.err(key, f"dataset file not found: {show(str(path), 200)} (expected {FILE_FORMS})")
        return f"{kind}:{path}"

    def _bad_dataset(self, key: str, value: object) -> PresetError:
        from ..workload.prompts import FILE_FORMS, PREFIX_FORM

        return self.err(key, f"expected {FILE_FORMS}, got {show(value)} (or {PREFIX_FORM})")

    def trace(self, key: str, value: object) -> str:
        """A Mooncake JSONL trace, made absolute (relative to the preset's folder) and read once
        to check every line (engine/workload/trace.py)."""
        from ..workload.trace import TraceError, load_trace

        raw = self.string(key, value, "a path to a JSONL trace file")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = self.base / path
        try:
            load_trace(path)
        except TraceError as exc:
            raise self.err(key, str(exc)) from None
        return str(path)

    def headers(self, key: str, value: object) -> tuple[tuple[str, str], ...]:
        """A table of NAME = "VALUE", each checked by engine/workload/request_shape.py (as -H)."""
        from ..workload.request_shape import RequestShapeError, check_headers

        if not isinstance(value, dict):
            raise self.bad(key, 'a table of NAME = "VALUE", e.g. {"X-Tenant" = "a"}', value)
        try:
            return check_headers(value, f"{self.source}: {key}")
        except RequestShapeError as exc:
            raise self._shaping_error(exc) from None

    def extra_body(self, key: str, value: object) -> str:
        """A table merged into every request body (as --extra-body), kept as its JSON text."""
        from ..workload.request_shape import RequestShapeError, check_extra_body, extra_body_text

        if not isinstance(value, dict):
            raise self.bad(key, "a table merged into every request body, e.g. {temperature = 0.5}", value)
        try:
            return extra_body_text(check_extra_body(value, f"{self.source}: {key}"))
        except RequestShapeError as exc:
            raise self._shaping_error(exc) from None

    def range_ratio(self, key: str, value: object) -> float:
        """0 <= R < 1, checked as --random-range-ratio is."""
        from ..workload.request_shape import RequestShapeError, check_range_ratio

        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.bad(key, "a number from 0 to below 1", value)
        try:
            return check_range_ratio(value, f"{self.source}: {key}")
        except RequestShapeError as exc:
            raise self._shaping_error(exc) from None

    def _shaping_error(self, exc: Exception) -> PresetError:
        return self.err("", str(exc).removeprefix(f"{self.source}: "))

    def arrival(self, key: str, value: object) -> str:
        """poisson, constant or gamma:K, as --arrival takes it (engine/workload/arrivals.py)."""
        from ..workload.arrivals import ARRIVAL_FORMS, ArrivalError, parse_arrival

        try:
            arrival = parse_arrival(value).describe() if isinstance(value, str) else ""
        except ArrivalError:
            arrival = ""
        if not arrival:
            raise self.bad(key, ARRIVAL_FORMS, value)
        return arrival
