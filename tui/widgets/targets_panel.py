"""Many targets (`--url` given several times): one compact row per target.

    target          tok/s  err/s  TTFT p50      p99  E2E p99   run queue  +1 more
    10.0.0.5:30000    411   0.00   86.1 ms  96.5 ms  7814 ms    21     0
    10.0.0.6:30000    206   0.00   86.1 ms  96.5 ms  7814 ms    11     0
    10.0.0.7:30000   GONE   0.00         -        -        -     -     -

Shown only with more than one target (Snapshot.targets is empty with one). At 80x24 it takes
the GPU panel's place (the GPUs are the first target's only) and lists the first
NARROW_ROWS targets, `+N more` on its title line; from 150 columns it lists up to WIDE_ROWS,
the GPU panel under it. `?` lists every URL. Every figure is the Snapshot's
(engine/core/target_stats.py TargetStats.live): live windows, the server's own running / queued.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ...engine.api import Snapshot
from .numbers import ms, num, rate

NARROW_ROWS = 3  # targets listed at 80x24 (under a title line: 4 lines in all)
WIDE_ROWS = 8
NAME_MIN, NAME_MAX = 14, 26
GONE_STYLE = "bold white on red"  # the header's SERVER GONE style

# (title, width) after the name column; right-aligned
COLUMNS = (("tok/s", 7), ("err/s", 7), ("TTFT p50", 10), ("p99", 9), ("E2E p99", 9), ("run", 6), ("queue", 6))


def short_names(urls: list[str]) -> list[str]:
    """Each URL as the operator tells them apart: `host:port` (path kept, scheme dropped), the
    domain all of them share dropped (`gpu-3.dc1.example.com` -> `gpu-3`)."""
    parts = []
    for u in urls:
        try:
            p = urlsplit(u)
            host, port, path = p.hostname or u, p.port, p.path.rstrip("/")
        except ValueError:
            host, port, path = u, None, ""
        parts.append((host, port, path))
    named = [h for h, _, _ in parts if not _is_ip(h)]
    suffix = _common_domain(named) if len(named) == len(parts) and len(parts) > 1 else ""
    out = []
    for host, port, path in parts:
        h = host[: -len(suffix)] if suffix and host.endswith(suffix) and len(host) > len(suffix) else host
        if ":" in h:  # IPv6
            h = f"[{h}]"
        out.append(h + (f":{port}" if port is not None else "") + path)
    return out


def _is_ip(host: str) -> bool:
    return ":" in host or host.replace(".", "").isdigit()


def _common_domain(hosts: list[str]) -> str:
    """The dotted suffix every host name shares (`.dc1.example.com`), "" when none."""
    if not hosts:
        return ""
    split = [h.split(".") for h in hosts]
    n = 0
    while all(len(s) > n + 1 for s in split) and len({s[-1 - n] for s in split}) == 1:
        n += 1
    return "." + ".".join(split[0][-n:]) if n else ""


def cut_middle(s: str, width: int) -> str:
    """`averyveryverylonghost:30000` -> `averyve…:30000`: the end (the port) kept."""
    if cell_len(s) <= width:
        return s
    tail = s[s.rfind(":"):] if ":" in s and len(s) - s.rfind(":") <= 7 else ""
    head = max(width - len(tail) - 1, 1)
    return s[:head] + "…" + tail if tail and head > 2 else s[: width - 1] + "…"


def targets_text(targets: tuple[dict, ...] | list[dict], width: int, max_rows: int) -> Text:
    """The block: a title line of columns, then a row per target (the first max_rows), `+N
    more` at the end of the title line (or on a last line when it does not fit there)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if not targets:
        return t
    figures = sum(w for _, w in COLUMNS)
    names = short_names([str(x.get("url", "")) for x in targets])
    name_w = max(NAME_MIN, min(NAME_MAX, max(cell_len(n) for n in names), width - figures - 1))
    hidden = max(len(targets) - max_rows, 0)
    shown = list(zip(targets, names, strict=False))[: len(targets) - hidden]
    t.append("target".ljust(name_w) + "".join(h.rjust(w) for h, w in COLUMNS), style="dim")
    more = Text()
    if hidden:  # on the title line: the block keeps its height (the header counts the gone)
        gone_hidden = sum(1 for x in targets[len(shown):] if x.get("gone"))
        long = Text.assemble((f"  +{hidden} more", "bold"), (f" ({gone_hidden} gone)" if gone_hidden else "", "bold red"))
        short = Text(f"  +{hidden} more", style="bold")
        for cand in (long, short):
            if name_w + figures + cand.cell_len <= width:
                t.append_text(cand)
                break
        else:
            more = short
    for x, name in shown:
        t.append("\n")
        t.append_text(_row(x, cut_middle(name, name_w), name_w))
    if more:
        t.append("\n")
        t.append_text(Text(more.plain.strip() + ": ? lists every target", style="bold"))
    return t


def _row(x: dict, name: str, name_w: int) -> Text:
    gone = bool(x.get("gone"))
    r = Text()
    r.append(name.ljust(name_w), style="bold red" if gone else "bold")
    tok = ("GONE", GONE_STYLE) if gone else (rate(x.get("output_tok_s")), "")
    errs = x.get("errors_s")
    # a gone target's latency windows still hold the requests before it went: "-", not stale
    # figures beside GONE (its errors/s stays: the failures as it went)
    lat = (lambda k: "-") if gone else (lambda k: ms(x.get(k)))
    cells = (
        tok,
        (rate(errs), "bold red" if errs else ""),
        (lat("ttft_p50_ms"), ""),
        (lat("ttft_p99_ms"), ""),
        (lat("e2e_p99_ms"), ""),
        (num(x.get("running")), ""),
        (num(x.get("queued")), "bold yellow" if x.get("queued") else ""),
    )
    for (text, style), (_, w) in zip(cells, COLUMNS, strict=False):
        pad = " " * max(w - cell_len(text), 1)
        r.append(pad)
        r.append(text, style=style)
    return r


class TargetsPanel(Static):
    """The per-target block; hidden (by the app's `-targets` class, redline.tcss) with one."""

    snapshot: reactive[Snapshot | None] = reactive(None, layout=True)

    def render(self) -> Text:
        s = self.snapshot
        if s is None or not s.targets:
            return Text()
        width = max(self.content_size.width or self.size.width, 40)
        wide = self.screen.has_class("-wide") if self.is_attached else False
        return targets_text(s.targets, width, WIDE_ROWS if wide else NARROW_ROWS)
