"""Secret scrubbing: every string redline writes passes through here first.

A secret (an API key, a bearer token) is replaced by "***" wherever it appears: raw, in its
JSON-escaped form, and URL-encoded. Serialized JSON text is checked with plain substring
search (cheap); only the rare line that contains a secret is re-parsed and scrubbed value by
value, so the result is still valid JSON.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any, Iterable

from ..workload.request_shape import secret_header

MASK = "***"

# Command-line options whose value is a credential: --api-key X, --api-key=X, --token X, --hf-token X,
# ...: judged by the option's whole words (split at - and _), so --max-total-tokens and
# --tokenizer-path keep their values (a pattern on the letters masked them)
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "auth", "authorization", "bearer", "credential",
                           "credentials", "apikey"})
_SECRET_PAIRS = frozenset({("api", "key"), ("admin", "key"), ("access", "key"), ("secret", "key")})


class _SecretOption:
    """`match(opt)`: is `opt` (`--hf-token`, `-api_key`) an option whose value is a credential?"""

    @staticmethod
    def match(opt: str) -> bool:
        if not opt.startswith("-"):
            return False
        words = [w for w in re.split(r"[-_]+", opt.lstrip("-").lower()) if w]
        return any(w in _SECRET_WORDS for w in words) or any(p in _SECRET_PAIRS for p in zip(words, words[1:], strict=False))


_SECRET_OPT = _SecretOption()
_SECRET_HEADER = re.compile(r"(authorization\s*:\s*(bearer\s+)?|x-api-key\s*:\s*|api-key\s*:\s*)\S.*", re.I)
_URL_USERINFO = re.compile(r"(://[^/@:\s]*:)[^/@\s]+@")


class Scrubber:
    """Replaces each non-empty secret by "***" in strings, JSON text and nested objects."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        raw = {str(s) for s in secrets if s}
        variants: set[str] = set()
        for s in raw:
            variants.add(s)
            variants.add(json.dumps(s)[1:-1])
            variants.add(json.dumps(s, ensure_ascii=False)[1:-1])
            variants.add(urllib.parse.quote(s, safe=""))
            variants.add(urllib.parse.quote_plus(s))
        variants.discard("")
        # Longest first, so a secret that contains another is masked whole.
        self.variants: tuple[str, ...] = tuple(sorted(variants, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self.variants)

    def hit(self, text: str) -> bool:
        return any(v in text for v in self.variants)

    def text(self, s: str) -> str:
        for v in self.variants:
            if v in s:
                s = s.replace(v, MASK)
        return s

    def obj(self, o: Any) -> Any:
        """A copy of o with every string (dict keys included) scrubbed."""
        if not self.variants:
            return o
        if isinstance(o, str):
            return self.text(o)
        if isinstance(o, dict):
            return {self.obj(k) if isinstance(k, str) else k: self.obj(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [self.obj(v) for v in o]
        return o


def as_scrubber(secrets: "Scrubber | Iterable[str] | None") -> Scrubber:
    if isinstance(secrets, Scrubber):
        return secrets
    return Scrubber(secrets or ())


def redact_argv(argv: Iterable[str]) -> list[str]:
    """The command line with credential option values replaced by "***".

    Catches `--api-key X`, `--api-key=X`, `--token X`, `-H "Authorization: Bearer X"` and
    `http://user:pass@host` even when the caller did not name the secret; a `-H`/`--header`
    whose name looks like a credential (engine/workload/request_shape.py secret_header) keeps
    its name, its value masked.
    """
    out: list[str] = []
    mask_next = header_next = False
    for a in (str(x) for x in argv):
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if header_next:
            out.append(_header_arg(a))
            header_next = False
            continue
        if a in ("-H", "--header"):
            out.append(a)
            header_next = True
            continue
        if a.startswith("--header="):
            out.append("--header=" + _header_arg(a[9:]))
            continue
        if a.startswith("-H") and not a.startswith("--"):
            out.append("-H" + _header_arg(a[2:]))
            continue
        if a.startswith("-") and "=" in a:
            opt, _, _val = a.partition("=")
            if _SECRET_OPT.match(opt):
                out.append(f"{opt}={MASK}")
                continue
        elif _SECRET_OPT.match(a):
            out.append(a)
            mask_next = True
            continue
        a = _SECRET_HEADER.sub(lambda m: m.group(1) + MASK, a)
        a = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", a)
        out.append(a)
    return out


def _header_arg(text: str) -> str:
    """`NAME: VALUE` with the value masked when NAME looks like a credential (or when the
    text has no name to judge and holds a credential word)."""
    name, colon, _ = text.partition(":")
    if colon and secret_header(name):
        return f"{name}: {MASK}"
    if not colon and secret_header(text):
        return MASK
    return text


def redact_url(url: str) -> str:
    """http://user:pass@host -> http://user:***@host"""
    return _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", url)
