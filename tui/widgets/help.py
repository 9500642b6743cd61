"""The help screen (`?`): every key, the settings this session runs with, and what each
figure on the screen means. Escape, `?` or `q` closes it; the screen below keeps drawing.

The figure lines say in one line what docs/numbers.md defines; the settings
come from the latest Snapshot and the engine's configuration, nothing else.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ...engine.api import MIN_LIVE_STEP_S, Snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from ...engine.api import EngineConfig

# (keys as typed, what they do): the live screen's BINDINGS and the app's, each action once (tests check it)
KEYS: tuple[tuple[str, str, str], ...] = (
    ("more", "+  =  ↑", "concurrency up by the step"),
    ("less", "-  ↓", "concurrency down by the step (never below 1)"),
    ("double", "]", "double the concurrency"),
    ("halve", "[", "halve the concurrency"),
    ("type_concurrency", "c", "type an exact concurrency (asks before going above max C)"),
    ("mode", "m", "switch concurrency ↔ open-loop rate mode (R req/s)"),
    ("rate_more", "+ -  (rate)", "rate mode: R up / down by the rate step (min 0.1/s)"),
    ("rate_double", "] [  (rate)", "rate mode: double / halve R (a trace: its speed)"),
    ("type_rate", "c  (rate)", "rate mode: type an exact R in requests/s"),
    ("workload", "w", "change output/input length, dataset, prefix ratio"),
    ("probe", "a", "abort everything in flight, hold the C=1 probe"),
    ("restore", "r", "return to the concurrency held before the probe"),
    ("pause", "space", "pause / resume sending"),
    ("preset", "p", "pick a preset and run it (any concurrency key cancels it)"),
    ("export", "e", "export the session so far to parquet"),
    ("lane", "l", "probe lane on/off: one request beside the load"),
    ("profile", "P", "server profiler at this load (--profile-s or step end)"),
    ("search", "k", "knee search from this C (any C key cancels)"),
    ("slo", "o", "set SLOs live: ttft=2s,itl=100ms (off clears)"),
    ("graph", "g", "switch between the live panels and the saturation curve"),
    ("steps_up", "PgUp  PgDn", "scroll the step table (the mouse wheel too)"),
    ("help", "?", "this help (Esc, ? or q closes it)"),
    ("quit_redline", "q  Ctrl-C", "stop all load, complete the session log, exit"),
    ("next_config", "n  (sweep)", "end this configuration (saved), start the next"),
)

FIGURES: tuple[tuple[str, str], ...] = (  # one line each at 80 columns (57 characters)
    ("[STATE]", "RUNNING, PAUSED, PROBE (C=1), PRESET, SERVER GONE"),
    ("C", "requests kept in flight (multi-turn: sessions)"),
    ("R=5/s poisson", "rate mode: arrivals a second, open loop (cap: max C)"),
    ("in-flight", "requests on the wire; backing off: waiting after 429/503"),
    ("lag p50/p99", "rate mode: actual − intended send time (schedule lag)"),
    ("held / dropped", "sends waiting at the in-flight cap; timed from intent"),
    ("server run/queue", "the server's own running / queued counts (its /metrics)"),
    ("server gen", "the server's own generation tok/s (its /metrics)"),
    ("KV %", "the server's KV cache in use (its /metrics)"),
    ("cache hit", "the server's prefix-cache hit rate, every request's"),
    ("cached", "this step's prompt tokens its answers said were cached"),
    ("  … / -", "cached: none of this step ended yet / server reports none"),
    ("N targets", "--url repeated: a row each; GONE = stopped answering"),
    ("done / fail", "requests completed / failed since the start"),
    ("out tok/s", "output tokens per second as they arrive, last 3 s"),
    ("TTFT", "sent → first token of any kind; p50/p99 of the last 10 s"),
    ("ITL", "gap between tokens, as bench_serving computes it"),
    ("E2E", "sent → last byte; p50/p99 of the last 10 s"),
    ("errors/s", "failed requests a second; kept out of every latency"),
    ("goodput", "with SLOs: output tok/s of requests meeting every SLO"),
    ("lane", "the C=1 lane beside the load: its p50s, and load ÷ lane"),
    ("sparkline ↑", "a column a second, newest right; from 0 to the top (↑)"),
    ("GPU W / %", "power per GPU, share of its limit; u = utilisation"),
    ("GPU bar ██░░", "its power as a share of its limit: full = at the limit"),
    ("tok/J", "output tokens per joule of GPU power (J/tok: inverse)"),
    ("client CPU/lag", "redline's own CPU and loop lag: high = timings late"),
    ("workers", "a row each: C share now; requests, tok/s, lag, CPU so far"),
    ("step row", "one per C held: own requests' TTFT, window's tok/s, ITL"),
    ("  dur", "how long the step was measured (its warm-up apart)"),
    ("  err / srv run", "its failed requests / most the server ran while measured"),
    ("  at / *", "when its C was set / the live row (pauses, probes too)"),
    ("  short", f"held under {MIN_LIVE_STEP_S:g} s: no point of the curve, judged by no rule"),
    ("  ≥", "a lower bound: requests still waiting count at their age"),
    ("  ↑ more ↓ more", "rows out of view above / below: PgUp PgDn scroll"),
)


KEY_WIDTH = 16  # one column of names for the three tables


def _table(rows: Iterable[tuple[str, str]], key_style: str = "bold") -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style=key_style, no_wrap=True, width=KEY_WIDTH)
    t.add_column(ratio=1)
    for k, v in rows:
        t.add_row(k, v)
    return t


def settings_rows(snap: Snapshot | None, config: EngineConfig, step: int, max_c: int, rate_step: float = 1.0) -> list[tuple[str, str]]:
    """The settings as (name, value) rows, from the snapshot and the engine's configuration."""
    s = snap
    wl = getattr(config, "workload", None)
    rows = target_rows(s, config) + [
        ("server", " ".join(x for x in (s.server_kind if s else "", s.model if s else "", s.caps if s else "") if x) or "-"),
        ("API", (s.api if s else "") or getattr(config, "api", None) or "-"),
    ]
    live = dict(s.workload) if s is not None and s.workload else (wl.describe() if wl is not None else None)
    if live:
        text = f"{live.get('dataset', '?')}, input {live.get('input_len', '?')} / output {live.get('output_len', '?')} tokens"
        if live.get("trace"):
            text = f"trace {live['trace']}"
        elif (live.get("turns") or 1) > 1:
            text += f"; {live['turns']} turns a session, think {live.get('think_s', 0):g} s"
        rows.append(("workload", text))
    mode = s.mode if s is not None else ("rate" if getattr(config, "rate", None) else "concurrency")
    if mode == "rate":
        r = s.target_rate if s is not None else getattr(config, "rate", None)
        arrival = (s.arrival if s is not None else "") or getattr(config, "arrival", "poisson")
        rows.append(("mode", f"rate: R={r:g} req/s, {arrival} arrivals" if r else f"rate, {arrival} arrivals"))
    elif mode == "trace":
        r = s.target_rate if s is not None else None
        rows.append(("mode", f"trace replay at ×{r:g} speed" if r else "trace replay"))
    else:
        rows.append(("mode", "concurrency (m: open-loop rate)"))
    rows.append(("step", f"+/- changes C by {step}, R by {rate_step:g} req/s"))
    rows.append(("max C", f"{max_c} (c asks above it; rate mode: the in-flight cap)"))
    rows += worker_rows(s, config)
    timeout = getattr(config, "request_timeout", None)
    if timeout is not None:
        rows.append(("request timeout", f"{timeout:g} s"))
    slo = getattr(s, "slo", "") if s is not None else ""
    rows.append(("SLOs", slo or "none set"))
    rows.append(("session", (s.session_dir if s else "") or "not logged"))
    return rows


def target_rows(snap: Snapshot | None, config: EngineConfig) -> list[tuple[str, str]]:
    """`URL` with one target; with several (`--url` repeated) how the load is split, then a row
    per URL with its weight, and GONE for one that is gone now."""
    first = (snap.url if snap and snap.url else getattr(config, "url", "")) or "-"
    more = tuple(getattr(config, "more_urls", ()) or ())
    live = list(snap.targets) if snap is not None and snap.targets else []
    urls = [str(x.get("url", "")) for x in live] or [first, *more]
    if len(urls) < 2:
        return [("URL", first)]
    weights = tuple(getattr(config, "weights", None) or ())
    if len(weights) != len(urls):
        weights = ()
    split = "by weight " + ":".join(f"{w:g}" for w in weights) if weights else "evenly"
    rows = [("targets", f"{len(urls)}, the load split {split}")]
    for i, u in enumerate(urls):
        text = u + (f"  weight {weights[i]:g}" if weights else "")
        if i < len(live) and live[i].get("gone"):
            text += "  GONE"
        rows.append((f"  {i + 1}", text))
    return rows


def worker_rows(snap: Snapshot | None, config: EngineConfig) -> list[tuple[str, str]]:
    """With `--workers N` (or `--ray`): how many and where, then a row per worker with its node
    and its share of C now (rate mode: of the in-flight cap), DEAD for one that died."""
    live = list(snap.workers) if snap is not None and snap.workers else []
    n = len(live) or int(getattr(config, "workers", 1) or 1)
    ray = getattr(config, "ray", None)
    if n < 2 and not live and ray is None:
        return []
    nodes = {str(w.get("node")) for w in live if w.get("node")}
    where = f"Ray actors ({ray})" if ray else "processes"
    text = f"{n} {where}" + (f" on {len(nodes)} nodes" if len(nodes) > 1 else " on " + next(iter(nodes)) if nodes else "")
    rows = [("workers", text + ", each its share of the load")]
    share = "C" if snap is None or snap.mode == "concurrency" else "cap"
    for w in live:
        state = f"{share} {w.get('share', '?')}" if w.get("alive", True) else "DEAD (its share went to the others)"
        rows.append((f"  w{w.get('worker', '?')}", f"{w.get('node') or '?'}  {state}"))
    return rows


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,question_mark,q", "close", "close"),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("up", "line(-1)", show=False),
        Binding("down", "line(1)", show=False),
    ]

    def __init__(self, snap: Snapshot | None, config: EngineConfig, step: int, max_c: int, rate_step: float = 1.0) -> None:
        super().__init__()
        self.snap = snap
        self.config = config
        self.step = step
        self.max_c = max_c
        self.rate_step = rate_step

    def compose(self) -> ComposeResult:
        view = VerticalScroll(id="help")
        view.border_title = "redline help"
        view.border_subtitle = "Esc ? q close · ↑ ↓ PgUp PgDn scroll"
        with view:
            yield Static(Text("Keys", style="bold underline"), classes="help-title first")
            yield Static(_table([(k, v) for _, k, v in KEYS]))
            yield Static(Text("Settings", style="bold underline"), classes="help-title")
            yield Static(_table(settings_rows(self.snap, self.config, self.step, self.max_c, self.rate_step)), id="help-settings")
            yield Static(Text("What the figures mean (docs/numbers.md)", style="bold underline"), classes="help-title")
            yield Static(_table(FIGURES))

    def action_close(self) -> None:
        self.dismiss(None)

    def action_page(self, n: int) -> None:
        view = self.query_one("#help", VerticalScroll)
        view.scroll_to(y=view.scroll_y + n * max(view.size.height - 1, 1), animate=False)

    def action_line(self, n: int) -> None:
        view = self.query_one("#help", VerticalScroll)
        view.scroll_to(y=view.scroll_y + n, animate=False)
