"""What redline puts on every request beside the prompt and its length (issue 38, the habits
of `vllm bench serve` and SGLang's bench_serving): headers, an extra body, ignore_eos, and
random input and output lengths around their means. Checks only (stdlib, no I/O); the
client sends them (engine/client/http.py, engine/client/api_formats.py build_body) and
engine/workload/prompts.py draws the lengths.

    headers             -H/--header 'NAME: VALUE' (repeated), [workload] headers = {NAME = "VALUE"}
    extra_body          --extra-body JSON, [workload] extra_body = {temperature = 0.5}
    ignore_eos          --no-ignore-eos, [workload] ignore_eos = false
    random_range_ratio  --random-range-ratio R, [workload] random_range_ratio = 0.25

A header whose name looks like a credential (`secret_header`) has a secret value: scrubbed
wherever redline writes or shows text, as the API key is (engine/session/scrub.py).

Every check raises RequestShapeError, one line naming the value (a secret value never) and
what is accepted.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MASK = "***"
HEADER_FORM = "'NAME: VALUE' (NAME letters, digits and !#$%&'*+-.^_`|~; VALUE printable ASCII on one line)"
RANGE_FORM = "a number from 0 to below 1 (lengths drawn from [L*(1-R), L*(1+R)]; 0 = fixed lengths)"
# headers the transport writes itself: the body's length and type, the connection, the
# stream's encoding (redline reads the raw SSE bytes); never the user's
RESERVED_HEADERS = frozenset({
    "host", "content-length", "content-type", "transfer-encoding", "connection", "accept-encoding",
    "keep-alive", "upgrade", "te", "trailer", "expect",
})
_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"})
_SECRET_WORDS = ("token", "secret", "key", "auth", "password", "passwd", "credential", "cookie")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# the body keys redline writes itself (every API: the API may be detected only at the start)
OWNED_KEYS = ("messages", "prompt", "text", "input_ids", "stream", "stream_options", "model", "max_tokens",
              "max_completion_tokens", "ignore_eos")
OWNED_SAMPLING = ("max_new_tokens", "ignore_eos")  # /generate's sampling_params keys redline writes
MAX_EXTRA_BODY_CHARS = 65_536
MAX_HEADERS = 64
MAX_HEADER_CHARS = 8192

Headers = tuple[tuple[str, str], ...]


class RequestShapeError(ValueError):
    """A header, extra body or range ratio that cannot be used: one line naming it."""


def secret_header(name: str) -> bool:
    """Whether a header's value is a credential, by its name: Authorization, X-Api-Key, Cookie,
    or any name holding token, secret, key, auth, password (case-insensitive)."""
    n = name.strip().lower()
    return n in _SECRET_NAMES or any(w in n for w in _SECRET_WORDS)


def _shown_text(text: str) -> str:
    """A header argument as an error shows it: never a value that may be a credential."""
    if any(w in text.lower() for w in _SECRET_WORDS):
        return "(its text withheld: it may hold a credential)"
    return repr(text if len(text) <= 60 else text[:57] + "...")


def parse_header(text: object, where: str = "--header") -> tuple[str, str]:
    """`NAME: VALUE` -> (NAME, VALUE), the value's surrounding blanks stripped (as curl does)."""
    if not isinstance(text, str):
        raise RequestShapeError(f"{where}: expected {HEADER_FORM}, got a {type(text).__name__}")
    name, colon, value = text.partition(":")
    if not colon:
        raise RequestShapeError(f"{where} {_shown_text(text)}: no ':' between the name and the value; "
                                f"expected {HEADER_FORM}")
    return check_header(name, value.strip(" \t"), where)


def check_header(name: object, value: object, where: str = "--header") -> tuple[str, str]:
    """One header, checked: a token name (not one the transport writes), a one-line value."""
    if not isinstance(name, str) or not name:
        raise RequestShapeError(f"{where}: empty header name; expected {HEADER_FORM}")
    if not _TOKEN.fullmatch(name):
        why = "spaces" if any(c.isspace() for c in name) else "characters a header name cannot have"
        shown = repr(name if len(name) <= 60 else name[:57] + "...")
        raise RequestShapeError(f"{where}: header name {shown} has {why}; expected {HEADER_FORM}")
    if name.lower() in RESERVED_HEADERS:
        raise RequestShapeError(f"{where}: header {name} is written by redline's transport itself; "
                                f"not one of {', '.join(sorted(RESERVED_HEADERS))}")
    if not isinstance(value, str):
        raise RequestShapeError(f"{where}: header {name}: expected a string value, got a {type(value).__name__}")
    if any(c in value for c in "\r\n\0"):
        raise RequestShapeError(f"{where}: header {name}: its value has a line break or NUL; expected {HEADER_FORM}")
    if not all(c == "\t" or 32 <= ord(c) < 127 for c in value):
        raise RequestShapeError(f"{where}: header {name}: its value has control or non-ASCII characters; "
                                f"expected {HEADER_FORM}")
    if len(name) + len(value) > MAX_HEADER_CHARS:
        raise RequestShapeError(f"{where}: header {name}: longer than {MAX_HEADER_CHARS} characters")
    return name, value.strip(" \t")


def check_headers(headers: Any, where: str = "headers") -> Headers:
    """(NAME, VALUE) pairs, each checked, no name twice (case-insensitive)."""
    pairs = tuple(headers.items()) if isinstance(headers, dict) else tuple(headers)
    if len(pairs) > MAX_HEADERS:
        raise RequestShapeError(f"{where}: {len(pairs)} headers, at most {MAX_HEADERS}")
    seen: set[str] = set()
    out = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise RequestShapeError(f"{where}: expected (NAME, VALUE) pairs, got a {type(pair).__name__}")
        name, value = check_header(pair[0], pair[1], where)
        if name.lower() in seen:
            raise RequestShapeError(f"{where}: header {name} given twice; give each header once")
        seen.add(name.lower())
        out.append((name, value))
    return tuple(out)


def shown_headers(headers: Headers) -> dict[str, str]:
    """The headers as meta.json and the screen show them: a credential's value as ***."""
    return {n: MASK if secret_header(n) else v for n, v in headers}


def secret_values(headers: Headers) -> tuple[str, ...]:
    """The values to scrub from everything written or shown (engine/session/scrub.py): each
    credential's value, and the credential alone after a scheme word (`Bearer TOKEN`: TOKEN)."""
    out: list[str] = []
    for n, v in headers:
        if secret_header(n) and v:
            out.append(v)
            scheme, _, rest = v.partition(" ")
            if rest.strip() and scheme.isalpha():
                out.append(rest.strip())
    return tuple(out)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_extra_body(text: object, where: str = "--extra-body") -> dict[str, Any]:
    """A JSON object's text -> the object, checked (check_extra_body)."""
    if not isinstance(text, str):
        raise RequestShapeError(f"{where}: expected a JSON object's text, got a {type(text).__name__}")
    if len(text) > MAX_EXTRA_BODY_CHARS:
        raise RequestShapeError(f"{where}: {len(text)} characters, at most {MAX_EXTRA_BODY_CHARS}")
    shown = repr(text if len(text) <= 60 else text[:57] + "...")
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or "too deeply nested"
        raise RequestShapeError(f"{where} {shown}: not valid JSON ({reason}); expected a JSON object such as "
                                "'{\"temperature\": 0.5}'") from None
    return check_extra_body(obj, where)


def check_extra_body(obj: Any, where: str = "extra_body") -> dict[str, Any]:
    """A JSON object that overrides none of the keys redline writes (OWNED_KEYS; /generate's
    sampling_params.max_new_tokens and ignore_eos); its sampling_params, if any, an object.
    JSON values only (no NaN or infinity, no dates)."""
    if not isinstance(obj, dict):
        raise RequestShapeError(f"{where}: expected a JSON object such as {{\"temperature\": 0.5}}, got a "
                                f"{'JSON ' + type(obj).__name__ if obj is not None else 'null'}")
    for k in obj:
        if not isinstance(k, str):
            raise RequestShapeError(f"{where}: keys must be strings, got {k!r}")
        if k in OWNED_KEYS:
            hint = "; for ignore_eos give --no-ignore-eos ([workload] ignore_eos = false)" if k == "ignore_eos" else ""
            raise RequestShapeError(f"{where}: {k!r} is written by redline itself; an extra body may not override "
                                    f"{', '.join(OWNED_KEYS)}{hint}")
    sp = obj.get("sampling_params")
    if sp is not None:
        if not isinstance(sp, dict):
            raise RequestShapeError(f"{where}: sampling_params must be an object (merged into /generate's), got {sp!r}")
        for k in OWNED_SAMPLING:
            if k in sp:
                raise RequestShapeError(f"{where}: sampling_params.{k} is written by redline itself "
                                        "(--output-len sets max_new_tokens, --no-ignore-eos ignore_eos)")
    try:
        json.dumps(obj, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RequestShapeError(f"{where}: holds a value JSON cannot carry ({exc}); expected strings, numbers, "
                                "booleans, lists and objects") from None
    return obj


def extra_body_text(obj: dict[str, Any] | None) -> str:
    """The object as WorkloadConfig.extra_body keeps it: compact JSON text, keys sorted (one
    text per object, whatever order a TOML or JSON source wrote), "" for none."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=True) if obj else ""


def check_range_ratio(value: object, where: str = "--random-range-ratio") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RequestShapeError(f"{where}: expected {RANGE_FORM}, got {value!r}")
    try:
        r = float(value)
    except ValueError:
        r = math.nan
    if not (0.0 <= r < 1.0):  # NaN fails too
        raise RequestShapeError(f"{where} {value!r}: expected {RANGE_FORM}")
    return r


def length_range(mean: int, ratio: float) -> tuple[int, int]:
    """The whole numbers a length is drawn from, inclusive: [floor(L*(1-R)), ceil(L*(1+R))],
    at least 1 (as `vllm bench serve --random-range-ratio` draws them)."""
    if ratio <= 0:
        return mean, mean
    lo = max(1, math.floor(mean * (1.0 - ratio)))
    return lo, max(lo, math.ceil(mean * (1.0 + ratio)))
