"""Prometheus text exposition -> plain samples, through prometheus_client's parser.

The result is keyed by the *sample* name exactly as the exposition text writes it, e.g.
``"sglang:generation_tokens_total"`` or ``"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"``.
prometheus_client munges counters into its OpenMetrics shape (it strips ``_total`` from the
family name, and *appends* ``_total`` to the samples of a counter declared without it, as
dcgm-exporter does for its energy counter); both are undone here so callers look metrics up
by the names they see in ``curl /metrics``.
"""

from __future__ import annotations

from collections.abc import Collection

from ..text import one_line

__all__ = [
    "PromParser",
    "PromSamples",
    "TelemetryParseError",
    "check_prometheus_head",
    "describe_error",
    "parse_prometheus",
]

# sample name -> [(labels, value), ...] in text order
PromSamples = dict[str, list[tuple[dict[str, str], float]]]

_MAX_MESSAGE = 160


class TelemetryParseError(ValueError):
    """Text that is not Prometheus exposition format (an HTML error page, JSON, garbage).

    The message is one line, fit for an operator notice.
    """


def describe_error(exc: BaseException) -> str:
    """``"ConnectError: All connection attempts failed"`` — type and message, on one line."""
    detail = one_line(exc, _MAX_MESSAGE, ellipsis=True)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _declared_counters(text: str) -> set[str]:
    """Names declared ``# TYPE <name> counter`` (cheap scan of the comment lines)."""
    out: set[str] = set()
    start = 0
    while True:
        i = text.find("# TYPE ", start)
        if i < 0:
            return out
        j = text.find("\n", i)
        line = text[i : j if j >= 0 else len(text)]
        start = j + 1 if j >= 0 else len(text)
        parts = line.split()
        if len(parts) >= 4 and parts[3] == "counter":
            out.add(parts[2])


def _filter_lines(text: str, names: Collection[str]) -> str:
    """Keep only the sample/HELP/TYPE lines whose metric name starts with one of ``names``.

    A pre-filter so that a large /metrics body (thousands of histogram lines) costs little
    to parse on the event loop; the lines kept still go through the real parser.
    """
    sample_prefixes = tuple(names)
    comment_prefixes = tuple(f"# {kind} {n}" for n in names for kind in ("HELP", "TYPE"))
    kept = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            if line.startswith(comment_prefixes):
                kept.append(line)
        elif line.startswith(sample_prefixes):
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def _parse_text(text: str, declared: set[str]) -> list[tuple[str, dict[str, str], float]]:
    """Run prometheus_client's parser; samples in text order with their original names."""
    # imported here, not at the top: a run without telemetry never parses a scrape, and the
    # parser pulls prometheus_client's whole package (~40 ms of every engine start)
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    try:
        for family in text_string_to_metric_families(text):
            undo_total = family.type == "counter" and family.name in declared
            for s in family.samples:
                name = s.name
                if undo_total and name == family.name + "_total":
                    name = family.name
                out.append((name, dict(s.labels), float(s.value)))
    except Exception as exc:  # untrusted input: any parser failure is a parse error
        detail = one_line(exc, _MAX_MESSAGE, ellipsis=True) or type(exc).__name__
        raise TelemetryParseError(f"not Prometheus text: {detail}") from exc
    return out


def parse_prometheus(text: str, names: Collection[str] | None = None) -> PromSamples:
    """Parse Prometheus text format into ``{sample_name: [(labels, value), ...]}``.

    ``names``: when given, only metrics whose names start with one of these prefixes are
    parsed (the rest of the body is skipped unchecked). Values are floats; NaN and ±Inf are
    kept as the text gives them. Empty text gives ``{}``.

    Raises TelemetryParseError (a ValueError) with a one-line message when the text is not
    Prometheus exposition format.
    """
    if names is not None:
        text = _filter_lines(text, names)
    out: PromSamples = {}
    for name, labels, value in _parse_text(text, _declared_counters(text)):
        out.setdefault(name, []).append((labels, value))
    return out


def check_prometheus_head(text: str, max_lines: int = 50) -> None:
    """Raise TelemetryParseError unless the first ``max_lines`` lines parse as Prometheus
    text. For telling "wrong URL / HTML page" from "metrics present but not ours" when a
    filtered parse found nothing."""
    head = "\n".join(text.splitlines()[:max_lines]) + "\n"
    parse_prometheus(head)


def _split_sample_line(line: str) -> tuple[str, str | None]:
    """``'name{labels} 1.5 [ts]'`` -> (``'name{labels}'``, ``'1.5'``); value None if absent."""
    brace = line.rfind("}")
    if brace >= 0:
        key, rest = line[: brace + 1], line[brace + 1 :].split()
    else:
        parts = line.split()
        key, rest = (parts[0] if parts else ""), parts[1:]
    return key, (rest[0] if rest else None)


class PromParser:
    """``parse_prometheus`` for repeated scrapes of one endpoint, much cheaper per scrape.

    prometheus_client spends ~100 us per labelled line on its label parsing; a scrape
    repeats the same series with new values. The first time a series (``name{labels}``)
    is seen its line goes through the real parser and the result (final name, labels) is
    remembered; afterwards only the value is converted (``float``). Any line whose value
    does not convert goes through the real parser, which judges it. Same result as
    ``parse_prometheus`` (the order of a name's series may differ).
    """

    MAX_SERIES = 20_000  # forget everything beyond this many remembered series

    def __init__(self, names: Collection[str] | None = None) -> None:
        self.names = tuple(names) if names is not None else None
        self._series: dict[str, tuple[str, dict[str, str]]] = {}

    def parse(self, text: str) -> PromSamples:
        """Parse one scrape; raises TelemetryParseError like ``parse_prometheus``."""
        lines = (_filter_lines(text, self.names) if self.names is not None else text).splitlines()
        out: PromSamples = {}
        uncached: list[str] = []
        missed: list[str] = []
        for raw in lines:
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                uncached.append(line)
                continue
            key, value = _split_sample_line(line)
            hit = self._series.get(key)
            if hit is not None and value is not None:
                try:
                    v = float(value)
                except ValueError:
                    pass
                else:
                    out.setdefault(hit[0], []).append((dict(hit[1]), v))
                    continue
            uncached.append(line)
            missed.append(key)
        if missed:
            chunk = "\n".join(uncached) + "\n"
            parsed = _parse_text(chunk, _declared_counters(chunk))
            if len(parsed) != len(missed):  # cannot happen with this parser; stay correct anyway
                return parse_prometheus(text, self.names)
            if len(self._series) + len(missed) > self.MAX_SERIES:
                self._series.clear()
            for key, (name, labels, number) in zip(missed, parsed, strict=False):
                self._series[key] = (name, labels)
                out.setdefault(name, []).append((dict(labels), number))
        return out
