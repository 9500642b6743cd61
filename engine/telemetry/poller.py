"""Scraping one Prometheus endpoint: GET, parse, and one-line reasons instead of exceptions."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

import httpx

from .prom_text import PromParser, PromSamples, TelemetryParseError, check_prometheus_head, describe_error


class PromPoller:
    """Base of the dcgm and server-metrics pollers; never raises on network or parse errors."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        names: Collection[str],
        *,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.client = client
        self.url = url
        self.timeout_s = timeout_s
        self.clock = clock
        self.last_error: str | None = None  # one line; None after a successful poll
        self._parser = PromParser(names=names)

    async def _scrape(self) -> tuple[PromSamples, str, float] | None:
        """(samples, body, clock() at the answer), or None with the reason in last_error."""
        try:
            resp = await self.client.get(self.url, timeout=self.timeout_s)
            t = self.clock()
            if resp.status_code != 200:
                self._fail(f"HTTP {resp.status_code}")
                return None
            text = resp.text
            return self._parser.parse(text), text, t
        except TelemetryParseError as exc:
            self._fail(str(exc))
        except Exception as exc:  # network, TLS, decoding, a bad URL: report, never raise
            self._fail(describe_error(exc))
        return None

    def _nothing(self, text: str, why: str) -> None:
        """An answer without the metrics wanted: say whether it was Prometheus text at all."""
        try:
            check_prometheus_head(text)
        except TelemetryParseError as exc:
            self._fail(str(exc))
            return
        self._fail(why)

    def _fail(self, why: str) -> None:
        self.last_error = f"{self.url}: {why}"
