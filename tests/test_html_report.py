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
from helpers import FAST_SIM, finish, main_in_process, redline_command, start_headless, write_preset

from redline.engine.report.compare import load_sessions
from redline.engine.report.html import HtmlUnavailable, collect, plotly_js, render
from redline.engine.sim.serve import spawn_sim_process

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
        procs = [start_headless(s.url, preset, base / name, "--label", name) for s, name in zip(sims, ("FAST", "SLOW"))]
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
         "median_e2e_latency_ms": 1000.0, "p99_e2e_latency_ms": 1500.0, "index": c}
    d.update(kw)
    return d


def _session(tmp: Path, name: str, steps: list[dict], **summary) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"label": name, "redline_version": "0.1.0", "format_version": 1,
                                             "server_info": {"tp_size": 4, "pp_size": 2}}))
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


# -- without plotly --------------------------------------------------------------------------

def test_html_without_plotly_says_what_to_install_in_one_line(tmp_path, capsys, monkeypatch):
    import redline.engine.report.html as html_mod

    a = _session(tmp_path, "alpha", [_step(8, 800, 300)])
    monkeypatch.setattr(html_mod, "html_available", lambda: False)
    rc = main_in_process(["report", str(a), "--no-plot", "--html", str(tmp_path / "r.html")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip() == f"redline: error: --html {tmp_path / 'r.html'}: needs plotly, the html extra: pip install 'redline[html]'"
    assert not (tmp_path / "r.html").exists()
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # plotly_js() itself, without the package
    with pytest.raises(HtmlUnavailable, match=r"pip install 'redline\[html\]'"):
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
