"""`redline report A B --html FILE` (engine/report/html.py): one self-contained page, opened in
a real browser. Headless Chromium (Debian's `chromium`, installed by .ci/run) loads the file with
the network off; the page's own script records, on <html>, the charts plotly drew and every
error (window errors, failed loads, console.error). Checked: no external URL in any src/href/
import, no error, every chart drawn (at least three), both sessions' labels, censored figures
drawn as bounds, and the SLO selector's verdicts; without plotly `--html` is one line, exit 2.

Without chromium these tests are skipped locally; in CI (CI=true) they fail saying so."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from redline.engine.report.compare import load_sessions
from redline.engine.report.html import HtmlUnavailable, collect, plotly_js, render

from helpers import FAST_SIM, finish, main_in_process, redline_command, start_headless, write_preset

PAGE_LIMIT = 1_500_000  # bytes: two sessions' page, the vendored basic bundle (1.19 MB) inside
from redline.engine.sim.serve import spawn_sim_process

from helpers import ROOT

RUN_TIMEOUT_S = 90
BROWSER_TIMEOUT_S = 120


# -- the browser ---------------------------------------------------------------------------

def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail("chromium is not installed: the HTML report's browser tests need it "
                    "(.ci/run installs Debian's chromium: apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium); CI installs it")


def browser_args(tmp: Path) -> list[str]:
    """Headless, no network: every host resolves to nothing and a dead proxy takes the rest."""
    return [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
            f"--user-data-dir={tmp / 'chromium-profile'}", "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=20000"]


def open_in_browser(page: Path, tmp: Path) -> str:
    """The DOM after the page ran (chromium --dump-dom)."""
    r = subprocess.run([*browser_args(tmp), "--dump-dom", page.resolve().as_uri()],
                       capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert r.returncode == 0 and "<html" in r.stdout, f"chromium failed ({r.returncode}): {r.stderr[-2000:]}"
    return r.stdout


def screenshot(page: Path, png: Path, tmp: Path, size: str = "1280,4200") -> None:
    """A picture of the page, taken the same way (README's docs/report.png)."""
    r = subprocess.run([*browser_args(tmp), f"--window-size={size}", f"--screenshot={png}", page.resolve().as_uri()],
                       capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert r.returncode == 0 and png.is_file(), r.stderr[-2000:]


class Dom(HTMLParser):
    """What the tests read of a page: <html>'s attributes, every URL-bearing attribute, the
    text of plotly's legends, script tags with a src, the style text and the script text."""

    URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "poster", "data", "srcset", "background", "ping"}

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root: dict[str, str] = {}
        self.urls: list[tuple[str, str, str]] = []
        self.legend: list[str] = []
        self.script_src: list[str] = []
        self.styles: list[str] = []
        self.scripts: list[str] = []
        self.rows: list[dict[str, str]] = []
        self._in: list[str] = []
        self._legend = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        if tag == "html":
            self.root = a
        for k, v in a.items():
            if k in self.URL_ATTRS:
                self.urls.append((tag, k, v))
            if k == "style":
                self.styles.append(v)
        if tag == "script" and "src" in a:
            self.script_src.append(a["src"])
        if tag == "tr" and "data-step" in a:
            self.rows.append(a)
        self._legend = "legendtext" in a.get("class", "")
        self._in.append(tag)

    def handle_endtag(self, tag):
        if self._in and self._in[-1] == tag:
            self._in.pop()
        self._legend = False

    def handle_data(self, data):
        tag = self._in[-1] if self._in else ""
        if tag == "style":
            self.styles.append(data)
        elif tag == "script":
            self.scripts.append(data)
        elif self._legend:
            self.legend.append(data)


EXTERNAL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)  # http://, https://, //host, ftp://...


def external_references(dom: Dom) -> list[str]:
    """Every place the page would fetch from elsewhere: a URL attribute that is not local
    (data:, blob:, #fragment, javascript:), a script with a src at all, @import or url() in
    CSS, an ES module import of a URL."""
    bad = [f"<{t} {k}={v!r}>" for t, k, v in dom.urls if EXTERNAL.match(v)]
    bad += [f"<script src={s!r}>" for s in dom.script_src]
    for css in dom.styles:
        bad += [m.group(0) for m in re.finditer(r"@import[^;]*|url\(\s*['\"]?(?:[a-z]+:)?//[^)]*\)", css, re.I)]
    for js in dom.scripts:
        bad += [m.group(0) for m in re.finditer(r"""\bimport\s*\(?\s*["'`](?:[a-z]+:)?//[^"'`]*|\bfrom\s*["'`](?:[a-z]+:)?//[^"'`]*""", js, re.I)]
    return bad


def drawn(dom: Dom) -> tuple[int, int, list[str], list[str]]:
    r = dom.root
    assert r.get("data-report-ready") == "1", f"the page's script did not finish: {r}"
    return (int(r["data-charts-expected"]), int(r["data-charts-drawn"]), r.get("data-charts", "").split(),
            json.loads(r.get("data-errors") or "[]"))


# -- two real sessions ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_sessions(tmp_path_factory) -> tuple[Path, Path]:
    """FAST and SLOW (a sim with half FAST's capacity), the same short preset with an SLO,
    run at the same time, each against its own sim. Each step closes at 2 s (max_hold_s): the
    page draws what the steps measured, steady or not (a steady window would hold each step
    STEADY_MIN_S = 4 s or more)."""
    base = tmp_path_factory.mktemp("html")
    preset = write_preset(base, "html", concurrency=[1, 2, 4], output_len=24, hold_s=1, max_hold_s=2,
                          extra="[slo]\nttft_ms = 2000\n[after]\nprobe_s = 0.5\n")
    sims = [spawn_sim_process(extra_args=FAST_SIM),
            spawn_sim_process(extra_args=("--set", "decode_base_s=0.02", "--set", "decode_per_seq_s=0.0002"))]
    try:
        procs = [start_headless(s.url, preset, base / name, "--label", name) for s, name in zip(sims, ("FAST", "SLOW"), strict=False)]
        for p in procs:
            rc, out, err = finish(p, RUN_TIMEOUT_S)
            assert rc == 0, (out, err)
    finally:
        for s in sims:
            s.stop()
    return base / "FAST", base / "SLOW"


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.xdist_group("test_html_report")
def test_report_html_of_two_real_sessions_renders_offline_in_chromium(two_sessions, tmp_path):
    fast, slow = two_sessions
    page = tmp_path / "r.html"
    r = subprocess.run([*redline_command(), "report", str(fast), str(slow), "--no-plot", "--html", str(page)],
                       capture_output=True, text=True, env={**os.environ, "CI": "true"}, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"wrote {page}" in r.stdout
    text = page.read_text(encoding="utf-8")
    static = Dom(text)
    assert external_references(static) == []
    assert not static.script_src and len(static.scripts) >= 3  # the probe, the data, plotly, the page: all inline
    dom = Dom(open_in_browser(page, tmp_path))
    expected, count, charts, errors = drawn(dom)
    assert errors == []
    assert count == expected >= 3
    assert page.stat().st_size < PAGE_LIMIT, page.stat().st_size  # plotly.js's basic bundle, not the 4.8 MB one
    assert "workload-warning" not in text  # the same preset: comparable
    # saturation, latency, Pareto, SLO attainment, and each session over time
    assert set(charts) == {"chart-saturation", "chart-latency", "chart-pareto", "chart-attainment",
                           "chart-timeline-0", "chart-timeline-1"}
    legend = " ".join(dom.legend)
    assert "FAST" in legend and "SLOW" in legend, legend
    assert external_references(dom) == []  # nor in what the scripts added
    assert len(dom.rows) == 6  # the step tables: 3 steps per session


# -- synthetic sessions: bounds and the SLO selector -----------------------------------------

def _step(c: int, tok_s: float, p99: float, bound: bool = False, **kw) -> dict:
    d = {"concurrency": c, "duration_s": 10.0, "completed": 50, "failed": 0, "output_throughput": tok_s,
         "input_throughput": 1.0, "request_throughput": 1.0, "median_ttft_ms": p99 / 2, "p99_ttft_ms": p99,
         "p99_ttft_ms_bound": bound, "median_itl_ms": 20.0, "p99_itl_ms": 40.0, "mean_tpot_ms": 21.0,
         "median_e2e_latency_ms": 1000.0, "p99_e2e_latency_ms": 1500.0, "index": c, "steady": True,
         "output_throughput_se": 0.0}
    d.update(kw)
    return d


def _session(tmp: Path, name: str, steps: list[dict], *, meta: dict | None = None, **summary) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"label": name, "redline_version": "0.1.0", "format_version": 1,
                                             "server_info": {"tp_size": 4, "pp_size": 2}, **(meta or {})}))
    (d / "summary.json").write_text(json.dumps({"label": name, "steps": steps, "break": None, "probe": None, **summary}))
    return d


def _page(tmp: Path, *dirs: Path) -> Path:
    sessions = [collect(s.path, s) for s in load_sessions(dirs)]
    page = tmp / "synthetic.html"
    page.write_text(render(sessions, plotly_js()), encoding="utf-8")
    return page


def test_bounds_are_drawn_as_bounds_and_the_page_is_pure(tmp_path):
    a = _session(tmp_path, "alpha <b>&", [_step(8, 800, 300), _step(16, 1400, 2500, bound=True)],
                 slo={"ttft_p99_ms": 1000.0})
    sessions = [collect(s.path, s) for s in load_sessions([a])]
    text = render(sessions, "/* plotly */")
    assert "alpha &lt;b&gt;&amp;" in text and "alpha <b>&" not in text  # a label is text, never markup
    data = json.loads(re.search(r'<script id="redline-data" type="application/json">(.*?)</script>', text, re.S).group(1))
    (s,) = data["sessions"]
    assert [p["ttft_p99_bound"] for p in s["steps"]] == [False, True]
    assert s["gpus"] == 8  # tp 4 x pp 2
    assert data["slo"] == {"ttft_p99": 1000.0}  # the selector starts on the recorded SLO
    assert "≥2500" in text  # the step table
    assert "circle-open" in text and "lower bound" in text  # the charts' open marker and hover


def test_the_slo_selector_judges_the_steps_in_chromium(tmp_path):
    a = _session(tmp_path, "alpha", [_step(8, 800, 300), _step(16, 1400, 2500), _step(32, 1500, 800, bound=True)],
                 slo={"ttft_p99_ms": 1000.0})
    b = _session(tmp_path, "beta", [_step(8, 700, 200), _step(16, 1000, 900)])
    dom = Dom(open_in_browser(_page(tmp_path, a, b), tmp_path))
    expected, count, charts, errors = drawn(dom)
    assert errors == [] and count == expected >= 3
    assert {"chart-saturation", "chart-latency", "chart-pareto"} <= set(charts)
    verdicts = [(json.loads(r["data-step"])["load"], r["class"].split()[-1]) for r in dom.rows]
    # TTFT p99 <= 1 s (alpha's recorded SLO): 2.5 s fails; a lower bound of 800 ms under it is not proven
    assert verdicts == [("C=8", "pass"), ("C=16", "fail"), ("C=32", "unknown"), ("C=8", "pass"), ("C=16", "pass")]
    assert "alpha" in " ".join(dom.legend) and "beta" in " ".join(dom.legend)


# -- comparable or said so; labels apart; bounds as bounds ----------------------------------------

LONG = {"workload": {"dataset": "random", "input_len": 1024, "output_len": 2048}, "target": {"api": "chat"}}
SHORT = {"workload": {"dataset": "random", "input_len": 32, "output_len": 128}, "target": {"api": "chat"}}
WARNING = ("warning: these sessions ran different workloads (long: 1024 in / 2048 out, chat; short: 32 in / 128 out, chat): "
           "figures at the same C are not comparable")


def _page_data(text: str) -> dict:
    return json.loads(re.search(r'<script id="redline-data" type="application/json">(.*?)</script>', text, re.S).group(1))


def _knees_at_16(tmp: Path) -> tuple[Path, Path]:
    """Two sessions of different workloads whose knee, largest load meeting the SLO and break
    share their loads (their labels would sit on one another), E2E a lower bound from C=16 on;
    C=4..32: a log2 axis (where plotly places an annotation at the log of its x)."""
    slo = {"ttft_p99_ms": 1000.0}
    marks = {"knee_concurrency": 16, "knee_reason": "within 5 %", "max_throughput_concurrency": 32,
             "break": {"reason": "plateau", "concurrency": 32, "last_good_concurrency": 16, "detail": "gain 1 %"}}
    steps = [_step(4, 450, 250), _step(8, 800, 300), _step(16, 1400, 500, p99_e2e_latency_ms_bound=True),
             _step(32, 1410, 700, p99_e2e_latency_ms=1400.0, p99_e2e_latency_ms_bound=True)]
    a = _session(tmp, "long", steps, meta=LONG, slo=slo, **marks)
    b = _session(tmp, "short", [{**st, "output_throughput": st["output_throughput"] + 5} for st in steps],
                 meta=SHORT, slo=slo, **marks)
    return a, b


def test_different_workloads_get_one_warning_at_the_top_of_the_page(tmp_path):
    a, b = _knees_at_16(tmp_path)
    text = _page(tmp_path, a, b).read_text(encoding="utf-8")
    data = _page_data(text)
    assert data["warning"] == WARNING
    assert [s["workload"] for s in data["sessions"]] == ["1024 in / 2048 out, chat", "32 in / 128 out, chat"]
    top = text[:text.index('id="slo-selector"')]  # in the header, above every chart
    assert text.count('id="workload-warning"') == 1 and f'id="workload-warning" role="alert">{WARNING}</p>' in top
    assert "(1024 in / 2048 out, chat)" in top  # each session's workload beside its name
    # the same workload: no warning
    c = _session(tmp_path, "long2", [_step(8, 700, 200)], meta=LONG)
    (tmp_path / "synthetic.html").unlink()
    text = _page(tmp_path, a, c).read_text(encoding="utf-8")
    assert _page_data(text)["warning"] is None and "workload-warning" not in text


def test_the_page_embeds_plotly_basic_bundle_and_stays_small(tmp_path):
    """The vendored bundle (engine/report/assets/README.md: npm plotly.js-basic-dist-min 4.1.1,
    MIT) is the one in the page, unchanged; two sessions' page stays under 1.5 MB."""
    import hashlib

    asset = ROOT / "engine" / "report" / "assets" / "plotly-basic.min.js"
    raw = asset.read_bytes()
    assert len(raw) == 1_191_749
    assert hashlib.sha256(raw).hexdigest() == "99784e3abfb07b142a15e521a439e6d9addceadb3f79553fd24c72774f0649ba"
    js = plotly_js()
    assert js == raw.decode("utf-8") and js.lstrip("/*\n ").startswith("plotly.js (basic - minified) v4.1.1")
    assert (asset.parent / "plotly.js-LICENSE").read_text().startswith("MIT License")
    a, b = _knees_at_16(tmp_path)
    page = _page(tmp_path, a, b)
    assert page.stat().st_size < PAGE_LIMIT
    text = page.read_text(encoding="utf-8")
    assert '"scattergeo"' not in text and '"scatter3d"' not in text  # no maps, no 3-D: not the full bundle


def test_two_long_sessions_stay_under_the_limit(tmp_path):
    """Two sessions of an hour each (a timeline row a second, GPU power) and 40 steps: the
    timeline is thinned, the page stays under 1.5 MB."""
    dirs = []
    for name in ("one", "two"):
        d = _session(tmp_path, name, [_step(c, 10.0 * c, 100.0 + c) for c in range(1, 41)])
        rows = [json.dumps({"elapsed_s": t + 0.123, "target_c": 1 + t // 90, "mode": "concurrency", "output_tok_s": 1234.567 + t,
                            "ttft_p99_ms": 345.678, "server_running": 37.0, "server_queued": 12.0, "state": "steady",
                            **{f"gpu{g}_power_w": 612.345 for g in range(8)}}) for t in range(3600)]
        (d / "timeline.ndjson").write_text("\n".join(rows) + "\n")
        dirs.append(d)
    page = _page(tmp_path, *dirs)
    assert page.stat().st_size < PAGE_LIMIT, page.stat().st_size
    assert len(_page_data(page.read_text(encoding="utf-8"))["sessions"][0]["timeline"]["cols"]["t"]) <= 1500


def test_labels_apart_and_bounds_drawn_as_bounds_in_chromium(tmp_path):
    """Drawn by the browser: the two sessions' knee (and max SLO, break) labels at the same C
    do not overlap; a lower bound is an open marker on a dashed segment, never on the line
    through the measured points; the warning is on the page."""
    a, b = _knees_at_16(tmp_path)
    dom = Dom(open_in_browser(_page(tmp_path, a, b), tmp_path))
    expected, count, charts, errors = drawn(dom)
    assert errors == [] and count == expected >= 3
    labels = json.loads(dom.root["data-labels"])
    assert sorted(lb["text"] for lb in labels) == sorted(["◆ knee C=16", "★ max SLO C=32", "✕ break C=32"] * 2)
    assert {lb["session"] for lb in labels} == {0, 1}
    for lb in labels:
        assert lb["r"] > lb["l"] and lb["b"] > lb["t"], lb  # drawn
        assert abs((lb["l"] + lb["r"]) / 2 - lb["at_px"]) < 3, lb  # right above the point it names
    for i, p in enumerate(labels):
        for q in labels[i + 1:]:
            apart = p["r"] <= q["l"] or q["r"] <= p["l"] or p["b"] <= q["t"] or q["b"] <= p["t"]
            assert apart, f"labels overlap: {p} and {q}"
    knees = [lb for lb in labels if "knee" in lb["text"]]
    assert knees[0]["x"] == knees[1]["x"] == 16 and knees[0]["t"] != knees[1]["t"]
    traces = json.loads(dom.root["data-latency-traces"])
    for sess in (0, 1):
        parts = {t["meta"]["part"]: t for t in traces if t["meta"]["session"] == sess and t["meta"]["series"] == "e2e_p99"}
        assert set(parts) == {"measured", "bound", "bound-segment"}
        measured, bound, segment = parts["measured"], parts["bound"], parts["bound-segment"]
        # measured: C=4 and 8 on the line; the bounds' places are gaps, not points
        assert measured["x"] == [4, 8, 16, 32] and measured["y"] == [1500.0, 1500.0, None, None]
        assert measured["dash"] == "solid" and measured["symbol"] == "circle"
        assert bound["mode"] == "markers" and bound["symbol"] == "circle-open"
        assert bound["x"] == [16, 32] and bound["y"] == [1500.0, 1400.0]
        assert segment["mode"] == "lines" and segment["dash"] == "dash"
        # each bound's segment starts at the bound and rises (at least this much, maybe more)
        assert segment["x"] == [16, 16, None, 32, 32, None]
        assert segment["y"][0] == 1500.0 and segment["y"][1] > 1500.0 and segment["y"][3] == 1400.0 and segment["y"][4] > 1400.0
    # a series with no bound is one measured trace
    ttft = [t for t in traces if t["meta"]["series"] == "ttft_p99"]
    assert [t["meta"]["part"] for t in ttft] == ["measured", "measured"]


# -- plotly.js is redline's own (vendored); a damaged install says so --------------------------

def test_html_needs_no_plotly_package_and_a_lost_bundle_is_one_line(tmp_path, capsys, monkeypatch):
    import redline.engine.report.html as html_mod

    a = _session(tmp_path, "alpha", [_step(8, 800, 300)])
    monkeypatch.setitem(sys.modules, "plotly", None)  # the plotly package is not needed
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    rc = main_in_process(["report", str(a), "--no-plot", "--html", str(tmp_path / "ok.html")])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "" and (tmp_path / "ok.html").stat().st_size > 1_000_000
    # an install that lost the bundle: one line, exit 2, nothing written
    monkeypatch.setattr(html_mod, "html_available", lambda: False)
    rc = main_in_process(["report", str(a), "--no-plot", "--html", str(tmp_path / "r.html")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip() == f"redline: error: --html {tmp_path / 'r.html'}: {html_mod.HTML_MISSING}"
    assert "reinstall redline" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()
    monkeypatch.setattr(html_mod, "PLOTLY_ASSET", "assets/no-such-file.js")  # plotly_js() itself
    with pytest.raises(HtmlUnavailable, match="reinstall redline"):
        plotly_js()


@pytest.mark.parametrize("target, names", [
    ("/nonexistent-dir/r.html", ["directory /nonexistent-dir does not exist"]),
    (".", ["is a directory; expected a file name such as report.html"]),
])
def test_a_bad_html_path_is_one_line_exit_2(tmp_path, capsys, target, names):
    a = _session(tmp_path, "alpha", [_step(8, 800, 300)])
    rc = main_in_process(["report", str(a), "--no-plot", "--html", target])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    for n in names:
        assert n in err
