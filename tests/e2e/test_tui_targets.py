"""The operator's side of many targets (issue 17, "Many targets"): `--url` repeated with
`--weights`, a row per target on screen (GONE for one that stopped answering, the others
carrying on), `N targets` in the header and every URL in help, and the per-target table of
`redline report`.

Pilot at 80x24 against two sims the test starts (127.0.0.1 only, as tests/e2e/test_tui_rate.py);
the command line in-process with everything that would start something booby-trapped
(tests/e2e/test_cli_errors.py has the matrix through the real process); the block's text from
hand-built rows.
"""

from __future__ import annotations

import argparse
import io
import json

import pytest
from rich.console import Console

from redline.engine.core.config import EngineConfig
from redline.engine.host import EngineThread
from redline.engine.workload.prompts import WorkloadConfig
from redline.tui.app import RedlineApp
from redline.tui.cli.report import format_targets_table, report_text
from redline.tui.widgets.help import HelpScreen, target_rows
from redline.tui.widgets.targets_panel import NARROW_ROWS, TargetsPanel, cut_middle, short_names, targets_text

from helpers import FAST_SIM, settle

FAST = FAST_SIM


def screen_lines(app: RedlineApp) -> list[str]:
    w, h = app.size
    console = Console(width=w, height=h, file=io.StringIO(), force_terminal=True, color_system=None, record=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


def hostport(url: str) -> str:
    return url.split("://", 1)[1]


def row_of(lines: list[str], url: str) -> str | None:
    return next((line for line in lines if line.strip().startswith(hostport(url))), None)


# -- two sims, weights 3,1, one of them stopped --------------------------------------------------
async def test_two_targets_split_3_to_1_on_screen_and_one_gone_leaves_the_other_running(sim_factory, tmp_path, capsys):
    a = sim_factory("healthy", extra_args=FAST)
    b = sim_factory("healthy", extra_args=FAST)
    out = tmp_path / "session"
    host = EngineThread(EngineConfig(
        url=a.url, more_urls=(b.url,), weights=(3.0, 1.0), concurrency=16,
        workload=WorkloadConfig(input_len=16, output_len=24), out_dir=out, calibrate=False, use_nvml=False,
    ))
    host.start()
    try:
        app = RedlineApp(host, step=4)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            def rows() -> tuple[dict, ...]:
                return host.snapshot.targets

            assert await settle(pilot, lambda: len(rows()) == 2 and all(r["output_tok_s"] > 0 for r in rows()), 10)
            # both rows on screen, the header counts the targets instead of naming one URL
            assert await settle(pilot, lambda: row_of(screen_lines(app), a.url) and row_of(screen_lines(app), b.url))
            lines = screen_lines(app)
            assert lines[0].lstrip().startswith("2 targets"), lines[0]
            assert "server run" not in lines[1], "each target's run/queue is on its row"
            assert all(len(line) <= 80 for line in lines) and len(lines) == 24
            assert app.query_one(TargetsPanel).size.height == 3  # a title and two rows
            assert not app.query_one("#gpus").display, "at 80x24 the block takes the GPU panel's place"
            # the split: 3:1 by tok/s (the engine's own per-target windows), within a bounded wait
            ratios: list[float] = []

            def near_3() -> bool:
                ra, rb = (r["output_tok_s"] for r in rows())
                ratios.append(ra / rb if rb else float("inf"))
                return 2.2 <= ratios[-1] <= 4.0

            await pilot.pause(3.0)  # the rate window (3 s) full of the split load
            assert await settle(pilot, near_3, 10), ratios[-5:]
            # help lists every URL with its weight
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            seen = []
            for _ in range(3):  # the settings are on the second page at 80x24
                seen += screen_lines(app)
                await pilot.press("pagedown")
                await pilot.pause()
            text = " ".join(seen)
            assert "targets" in text and "by weight 3:1" in text and a.url in text and b.url in text, text
            await pilot.press("escape")
            await pilot.pause()
            # the second target goes away: its row reads GONE, the first keeps running
            b.stop()
            assert await settle(pilot, lambda: rows()[1]["gone"], 15), rows()
            assert await settle(pilot, lambda: "GONE" in (row_of(screen_lines(app), b.url) or ""), 5)
            lines = screen_lines(app)
            assert "GONE" not in row_of(lines, a.url), lines
            assert lines[0].lstrip().startswith("2 targets (1 gone)"), lines[0]
            assert any(f"target {b.url} gone" in w for w in host.snapshot.warnings), host.snapshot.warnings
            done = host.snapshot.completed
            assert await settle(pilot, lambda: host.snapshot.completed > done + 20 and rows()[0]["output_tok_s"] > 0, 10)
            snap = host.snapshot
            assert snap.state == "running" and not rows()[0]["gone"], (snap.state, rows())
            assert "[RUNNING]" in screen_lines(app)[1] and "SERVER GONE" not in " ".join(screen_lines(app))
    finally:
        host.stop()
    # the session's summary has both targets; `redline report` prints them after the step table
    summary = json.loads((out / "summary.json").read_text())
    assert [t["url"] for t in summary["targets"]] == [a.url, b.url]
    assert summary["targets"][1]["gone"] is True
    text, _ = report_text([out])
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("targets (2"))
    assert lines[head + 1].split()[:4] == ["target", "requests", "errors", "tok/s"]
    assert lines[head + 2].startswith(a.url) and not lines[head + 2].rstrip().endswith("GONE")
    assert lines[head + 3].startswith(b.url) and lines[head + 3].rstrip().endswith("GONE")
    reqs = [int(lines[head + k].split()[1]) for k in (2, 3)]
    assert reqs[0] > reqs[1] > 0, lines[head:head + 4]


# -- the command line --------------------------------------------------------------------------
def parse(argv: list[str]) -> argparse.Namespace:
    from redline.tui.cli.arguments import build_parser

    ns = build_parser().parse_args(argv)
    ns.argv = ["redline", *argv]
    return ns


def test_urls_and_weights_reach_the_engine_config(tmp_path):
    from redline.engine.preset import load_preset, resolve_preset
    from redline.tui.cli.launch import checked_config

    u1, u2, u3 = "http://127.0.0.1:9", "http://127.0.0.1:8/v1", "http://10.0.0.2:30000"
    cfg = checked_config(parse(["--url", u1, "--url", u2, "--url", u3, "--weights", "2,1,1", "--out", str(tmp_path / "a")]))
    assert (cfg.url, cfg.more_urls, cfg.weights) == (u1, (u2, u3), (2.0, 1.0, 1.0))
    cfg = checked_config(parse(["--url", u1, "--url", u2, "--out", str(tmp_path / "b")]))
    assert (cfg.more_urls, cfg.weights) == ((u2,), None), "no --weights: evenly"
    cfg = checked_config(parse(["--url", u1, "--out", str(tmp_path / "c")]))
    assert (cfg.url, cfg.more_urls, cfg.weights) == (u1, (), None), "one --url as before"
    # `redline run`: --url repeated there too; a preset's [target].url only without --url
    (tmp_path / "p.toml").write_text('[target]\nurl = "http://127.0.0.1:7"\n[ramp]\nconcurrency = [4]\n')
    preset = load_preset(resolve_preset(str(tmp_path / "p.toml")))
    ns = parse(["run", str(tmp_path / "p.toml"), "--headless", "--url", u1, "--url", u3, "--weights", "1,3", "--out", str(tmp_path / "d")])
    cfg = checked_config(ns, preset)
    assert (cfg.url, cfg.more_urls, cfg.weights) == (u1, (u3,), (1.0, 3.0))
    cfg = checked_config(parse(["run", str(tmp_path / "p.toml"), "--headless", "--out", str(tmp_path / "e")]), preset)
    assert (cfg.url, cfg.more_urls) == ("http://127.0.0.1:7", ())


U1, U2 = "http://127.0.0.1:9", "http://127.0.0.1:8"


@pytest.mark.parametrize("argv, needles", [
    (["--url", U1, "--url", U2, "--weights", "3"], ("--weights '3'", "2 positive numbers", "one per --url")),
    (["--url", U1, "--url", U2, "--weights", "3,1,1"], ("--weights '3,1,1'", "2 positive numbers")),
    (["--url", U1, "--url", U2, "--weights", "3,x"], ("--weights '3,x'", "positive numbers")),
    (["--url", U1, "--url", U2, "--weights", "3,0"], ("--weights '3,0'", "positive")),
    (["--url", U1, "--url", U2, "--weights", "3,-1"], ("--weights '3,-1'",)),
    (["--url", U1, "--weights", "3"], ("--weights '3'", "--url two or more times")),
    (["--weights", "3,1"], ("--weights '3,1'", "--url two or more times")),  # the built-in sim would start
    (["--url", U1, "--url", U1], (f"--url '{U1}'", "given twice")),
    (["--url", U1, "--url", U1 + "/v1/"], (f"--url '{U1}/v1/'", "given twice", f"same target as '{U1}'")),
    (["--url", U1, "--url", "ftp://127.0.0.1:21", "--url", U2], ("'ftp://127.0.0.1:21'", "scheme 'ftp'")),
    (["--url", U1, "--url", "http://127.0.0.1:99999"], ("99999", "bad port")),
    (["--url", U1, "--url", U2, "--sim-profile", "fragile"], ("--sim-profile", "--url")),
    (["run", "quick", "--headless", "--url", U1, "--url", U2, "--weights", "1"], ("--weights '1'", "2 positive numbers")),
    (["run", "quick", "--url", U1, "--url", "garbage"], ("'garbage'", "http://HOST[:PORT]")),
    (["run", "quick", "--headless", "--weights", "1,1"], ("--weights '1,1'", "--url")),
])
def test_bad_targets_are_one_line_exit_2_before_anything_starts(nothing_starts, capsys, tmp_path, argv, needles):
    from redline.tui import cli

    try:
        rc = cli.main([*argv, "--out", str(tmp_path / "s")])
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    assert rc == 2 and nothing_starts == [] and out.out == "", (rc, nothing_starts, out)
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(("redline: error: ", "redline run: error: ")), out.err
    assert "Traceback" not in out.err
    assert all(n in lines[0] for n in needles), (needles, lines[0])


# -- the block's text ----------------------------------------------------------------------------
def _row(url: str, tok: float = 100.0, gone: bool = False, **kw) -> dict:
    r = {"url": url, "output_tok_s": tok, "errors_s": 0.0, "ttft_p50_ms": 62.0, "ttft_p99_ms": 124.0,
         "e2e_p50_ms": 8700.0, "e2e_p99_ms": 9646.0, "gone": gone, "running": 12.0, "queued": 0.0}
    r.update(kw)
    return r


def test_short_names_tell_the_targets_apart():
    assert short_names(["http://127.0.0.1:8001", "http://127.0.0.1:8002"]) == ["127.0.0.1:8001", "127.0.0.1:8002"]
    assert short_names(["https://gpu-1.dc1.example.com", "https://gpu-2.dc1.example.com:8443"]) == ["gpu-1", "gpu-2:8443"]
    assert short_names(["http://a.example.com:1", "http://b.other.org:1"]) == ["a.example.com:1", "b.other.org:1"]
    assert short_names(["http://router:80/v1", "http://[::1]:30000"]) == ["router:80/v1", "[::1]:30000"]
    assert cut_middle("a-very-long-host-name-of-a-node:30000", 20) == "a-very-long-h…:30000"
    assert cut_middle("short:1", 20) == "short:1"


def test_block_lists_the_first_targets_and_counts_the_rest_on_its_title_line():
    rows = [_row(f"http://10.0.0.{i}:30000", gone=i == 3) for i in range(1, 7)]
    text = targets_text(rows, 78, NARROW_ROWS).plain.splitlines()
    assert len(text) == 1 + NARROW_ROWS, text
    assert text[0].split()[:3] == ["target", "tok/s", "err/s"] and text[0].rstrip().endswith("+3 more"), text[0]
    assert [line.split()[0] for line in text[1:]] == ["10.0.0.1:30000", "10.0.0.2:30000", "10.0.0.3:30000"]
    assert text[3].split()[1:] == ["GONE", "0.00", "-", "-", "-", "12", "0"], "no stale latencies beside GONE"
    assert text[1].split()[1:] == ["100", "0.00", "62.0", "ms", "124", "ms", "9646", "ms", "12", "0"]
    assert all(len(line) <= 78 for line in text)
    wide = targets_text(rows, 120, 8).plain.splitlines()
    assert len(wide) == 7 and "more" not in wide[0]
    assert targets_text(rows[:2], 78, NARROW_ROWS).plain.count("\n") == 2
    assert targets_text((), 78, NARROW_ROWS).plain == ""


def test_help_rows_list_every_target_with_its_weight():
    cfg = EngineConfig(url=U1, more_urls=(U2, "http://127.0.0.1:7"), weights=(2.0, 1.0, 1.0))
    rows = target_rows(None, cfg)
    assert rows[0] == ("targets", "3, the load split by weight 2:1:1")
    assert [v for _, v in rows[1:]] == [f"{U1}  weight 2", f"{U2}  weight 1", "http://127.0.0.1:7  weight 1"]
    assert target_rows(None, EngineConfig(url=U1)) == [("URL", U1)]


def test_report_table_only_with_several_targets():
    one = [{"url": U1, "requests": 10, "completed": 10, "errors": 0, "output_tokens": 240, "output_tok_s": 24.0,
            "ttft_p50_ms": 5.0, "ttft_p99_ms": 9.0, "e2e_p50_ms": 50.0, "e2e_p99_ms": 90.0, "gone": False}]
    assert format_targets_table(one) == ""
    two = one + [dict(one[0], url=U2, requests=4, errors=3, output_tok_s=8.25, ttft_p50_ms=None, gone=True)]
    lines = format_targets_table(two).splitlines()
    assert lines[0] == "targets (2, 1 gone at the end)"
    assert lines[1].split() == ["target", "requests", "errors", "tok/s", "TTFT", "p50", "TTFT", "p99", "E2E", "p50", "E2E", "p99"]
    assert lines[2].split() == [U1, "10", "0", "24.0", "5.0", "9.0", "50.0", "90.0"]
    assert lines[3].split() == [U2, "4", "3", "8.2", "-", "9.0", "50.0", "90.0", "GONE"]
