"""A sweep's answers from its configurations' recorded sessions, without a server (issue 44):
the points over repeats, the comparisons (Holm across the report, lower bounds, one run a
side), the Pareto front and the answer under an SLO, the entry of repeats, the time left, the
HTML page's front, `[ramp] repeats` and the command line's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from redline.engine.preset import load_preset
from redline.engine.preset.toml_out import preset_to_toml
from redline.engine.sweep.answers import comparisons, pair_lines, pareto, slo_answer
from redline.engine.sweep.runner import TimeLeft
from redline.engine.sweep.spec import Config, SweepError, SweepSpec
from redline.engine.sweep.sweep_file import COMPLETED, entry
from redline.engine.sweep.table import format_sweep

from helpers import main_in_process


def _step(c: int, tok_s: float, tpot: float, p99: float = 50.0, bound: bool = False, **kw) -> dict:
    return {"concurrency": c, "duration_s": 10.0, "completed": 40, "failed": 0, "output_throughput": tok_s,
            "input_throughput": 1.0, "request_throughput": 1.0, "median_ttft_ms": p99 / 2, "p99_ttft_ms": p99,
            "p99_ttft_ms_bound": bound, "p99_itl_ms": tpot * 2, "mean_tpot_ms": tpot, "steady": True, **kw}


def _session(d: Path, steps: list[dict], *, gpus: int = 8, slo: dict | None = None, knee: int | None = None, mb: int = 8) -> Path:
    d.mkdir(parents=True)
    meta = {"label": d.name, "server_info": {"tp_size": 1, "pp_size": gpus},
            "fingerprint": {"server": {"kind": "sglang", "version": "0.5.9", "args": {"pp_max_micro_batch_size": mb}}}}
    (d / "meta.json").write_text(json.dumps(meta))
    summ = {"label": d.name, "steps": steps, "break": None, "probe": None, **({"slo": slo} if slo else {}),
            "knee_concurrency": knee, "knee_reason": "within 5 %" if knee else "still rising at max"}
    (d / "summary.json").write_text(json.dumps(summ))
    return d


def _config(tmp: Path, label: str, runs: list[list[dict]], **kw) -> dict:
    dirs = [_session(tmp / label / f"r{k}", steps, **kw) for k, steps in enumerate(runs, 1)]
    return entry(Config({"mb": label}, label), COMPLETED, runs=[(d, COMPLETED) for d in dirs], repeats=len(runs))


def test_points_over_repeats_and_a_clear_difference(tmp_path):
    mb8 = _config(tmp_path, "mb8", [[_step(4, 250 + d, 15.2), _step(16, 520 + d, 15.5)] for d in (-2, 0, 2)], knee=16)
    mb64 = _config(tmp_path, "mb64", [[_step(4, 251 + d, 15.2), _step(16, 960 + 3 * d, 15.9)] for d in (-2, 0, 2)], mb=64)
    c16 = mb64["points"][1]
    assert c16["load"] == "C=16" and c16["n"] == 3 and c16["output_tok_s"] == pytest.approx(960)
    assert c16["output_tok_s_ci"][0] < 960 < c16["output_tok_s_ci"][1] and c16["tok_s_per_gpu"] == pytest.approx(120)
    assert c16["tok_s_per_user"] == pytest.approx(1000 / 15.9, rel=1e-4) and c16["values"]["output_tok_s"] == [954, 960, 966]
    assert mb8["knee_concurrency"] == 16 and mb8["knee_spread"] == [16, 16] and "the same in 3 of 3 repeats" in mb8["knee_reason"]
    assert mb64["max_output_throughput"] == pytest.approx(960) and mb64["max_throughput_concurrency"] == 16
    rows = comparisons([mb8, mb64])
    tok = {r["concurrency"]: r for r in rows if r["metric"] == "output_tok_s"}
    assert tok[16]["a"] == "mb64" and tok[16]["b"] == "mb8" and tok[16]["verdict"] == "better"
    assert tok[16]["change_pct"] == pytest.approx(100 * 440 / 520, abs=0.01)
    assert tok[4]["verdict"] == "no clear difference" and tok[4]["ci_pct"][0] < 0 < tok[4]["ci_pct"][1]
    tpot16 = next(r for r in rows if r["metric"] == "tpot_ms" and r["concurrency"] == 16)
    assert tpot16["verdict"] == "worse"  # every repeat's TPOT 15.9 against 15.5: no noise, a real difference
    # Holm: every interval drawn at its own level (0.05 / m at the smallest p), never wider than 95 %
    assert all(r["confidence"] >= 0.95 for r in rows) and max(r["confidence"] for r in rows) == pytest.approx(1 - 0.05 / len(rows))
    (line,) = pair_lines(rows)
    assert line.startswith("mb64 vs mb8: +85 % tok/s at C=16 (+") and ", clear;" in line


def test_one_run_a_side_is_never_a_win_and_a_bound_decides_nothing_the_wrong_way(tmp_path):
    a = _config(tmp_path, "a", [[_step(16, 500, 15.0, p99=900, bound=True)]])
    b = _config(tmp_path, "b", [[_step(16, 1000, 15.0, p99=100)]])
    rows = comparisons([a, b])
    assert {r["verdict"] for r in rows} == {"no clear difference"} and all(r["ci_pct"] is None for r in rows)
    assert "fewer than 2 repeats a side" in rows[0]["why"]
    assert "one run a side: --repeats 3 gives intervals" in pair_lines(rows)[0]
    # a's TTFT p99 is a lower bound above b's: it is worse, surely; below b's, it proves nothing
    hi = _config(tmp_path, "hi", [[_step(16, 500, 15.0, p99=900 + d, bound=True)] for d in (0, 5, 10)])
    lo = _config(tmp_path, "lo", [[_step(16, 500, 15.0, p99=100 + d)] for d in (0, 5, 10)])
    ttft = next(r for r in comparisons([lo, hi]) if r["metric"] == "ttft_p99_ms")
    assert (ttft["a"], ttft["verdict"], ttft["bound"]) == ("hi", "worse", [True, False])
    rev = next(r for r in comparisons([hi, lo]) if r["metric"] == "ttft_p99_ms")
    assert rev["a"] == "lo" and rev["verdict"] == "better"  # b (hi) is the bound: lo is surely better
    below = _config(tmp_path, "below", [[_step(16, 500, 15.0, p99=50 + d, bound=True)] for d in (0, 5, 10)])
    under = next(r for r in comparisons([lo, below]) if r["metric"] == "ttft_p99_ms")
    assert under["verdict"] == "no clear difference" and "lower bound" in under["why"]


def test_the_front_and_the_answer_under_an_slo(tmp_path):
    slo = {"tpot_ms": 50.0, "attainment": 0.9}
    ok = {"slo_attainment": 1.0}
    fast = _config(tmp_path, "tp8", [[_step(8, 800, 20, **ok), _step(64, 3000, 45, **ok), _step(128, 3300, 80, slo_attainment=0.1)]] * 2,
                   slo=slo)
    slow = _config(tmp_path, "pp8", [[_step(8, 400, 30, **ok), _step(64, 1500, 60, slo_attainment=0.2)]] * 2, slo=slo)
    front = pareto([fast, slow])
    assert [(p["label"], p["concurrency"]) for p in front] == [("tp8", 8), ("tp8", 64), ("tp8", 128)]
    assert front[0]["tok_s_per_user"] == pytest.approx(50.0) and front[1]["tok_s_per_gpu"] == pytest.approx(375.0)
    ans = slo_answer([fast, slow])
    assert (ans["label"], ans["concurrency"], ans["tok_s_per_gpu"]) == ("tp8", 64, pytest.approx(375.0))
    assert ans["slo"].startswith("TPOT")
    text = format_sweep({"sweep": {"preset": "p", "end_reason": "sweep finished"}, "configurations": [fast, slow],
                         "comparisons": comparisons([fast, slow]), "pareto": front, "slo_answer": ans})
    assert "best under TPOT" in text and "tp8 at C=64, 375 tok/s/GPU" in text
    assert "fingerprints: only pp_max_micro_batch_size differs" not in text  # both mb8: nothing differs
    assert "nothing differs" in text


def test_the_time_left_counts_runs_to_come_and_startups():
    t = TimeLeft(configs=3, repeats=2, estimate_s=60.0)
    assert t.left_s(0, 1) == 6 * 60.0  # nothing measured yet: the preset's estimate
    t.runs_s += [30.0, 50.0]
    t.startups_s.append(10.0)
    assert t.left_s(1, 1) == 4 * 40.0 + 1 * 10.0  # 4 runs to go, one more server to launch
    assert TimeLeft(3, 2, 60.0, restart_each=True, runs_s=[40.0], startups_s=[10.0]).left_s(1, 1) == 4 * 40 + 3 * 10
    assert t.text(2, 2) == "about 40 s left"


def test_the_html_page_marks_the_front(tmp_path):
    from redline.engine.report.html_pareto import mark_front

    sessions = [{"gpus": 8, "steps": [{"tok_s": 800.0, "per_user": 50.0, "load": "C=8"}, {"tok_s": 900.0, "per_user": 10.0, "load": "C=64"}]},
                {"gpus": 8, "steps": [{"tok_s": 400.0, "per_user": 40.0, "load": "C=8"}, {"tok_s": 3000.0, "per_user": 20.0, "load": "C=64"}]}]
    mark_front(sessions)
    assert sessions[0]["front"] == [True, False] and sessions[1]["front"] == [False, True]


def test_ramp_repeats_in_a_preset_reads_back(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('name = "r"\n[ramp]\nconcurrency = [4, 8]\nrepeats = 3\n')
    p = load_preset(f)
    assert p.repeats == 3
    back = tmp_path / "back.toml"
    back.write_text(preset_to_toml(p))
    assert load_preset(back).repeats == 3
    f.write_text('name = "r"\n[ramp]\nconcurrency = [4]\nrepeats = 0\n')
    with pytest.raises(Exception, match=r"\[ramp\].repeats"):
        load_preset(f)


@pytest.mark.parametrize("argv,needle", [
    (["sweep", "--url", "http://127.0.0.1:9", "--repeats", "0", "--headless"], "--repeats '0': expected a whole number >= 1"),
    (["sweep", "--url", "http://127.0.0.1:9", "--restart-each", "--headless"], "--restart-each: relaunches"),
    (["sweep", "--url", "http://127.0.0.1:9", "--resume", "--headless"], "--resume: give the --out"),
    (["sweep", "--url", "http://127.0.0.1:9", "--gpus", "x", "--headless"], "--gpus 'x'"),
    (["run", "quick", "--repeats", "2", "--gate", "knee>=8", "--headless"], "--repeats: a gate judges one run"),
])
def test_bad_repeat_flags_are_one_line(capsys, argv, needle):
    assert main_in_process(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_resume_of_a_directory_with_no_sweep_is_one_line(capsys, tmp_path):
    (tmp_path / "x").mkdir()
    assert main_in_process(["sweep", "--url", "http://127.0.0.1:9", "--resume", "--headless", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "holds no sweep.json" in err and err.count("\n") == 1


def test_repeats_and_gpus_are_checked_in_the_spec():
    with pytest.raises(SweepError, match="--repeats 101: expected a whole number 1-100"):
        SweepSpec(urls=["http://127.0.0.1:9"], repeats=101).check()
    with pytest.raises(SweepError, match="--gpus 0"):
        SweepSpec(urls=["http://127.0.0.1:9"], gpus=0).check()


def test_the_gpus_of_a_configuration_server_first_then_the_flag_then_telemetry():
    from redline.engine.sweep.points import gpus_of

    sglang = {"server_info": {"tp_size": 2, "pp_size": 4, "dp_size": 1}, "fingerprint": {"gpus": {"count": 8}}}
    assert gpus_of(sglang, 3) == (8, "server")
    vllm = {"fingerprint": {"server": {"args": {"tensor_parallel_size": "2"}}, "gpus": {"count": 8}}}
    assert gpus_of(vllm, None) == (2, "server")  # its launch command's --tensor-parallel-size
    plain = {"fingerprint": {"server": {"args": {}}, "gpus": {"count": 8}}}
    assert gpus_of(plain, 1) == (1, "--gpus") and gpus_of(plain, None) == (8, "telemetry") and gpus_of({}, None) == (None, None)


async def test_the_fingerprint_asks_vllm_for_its_version_and_dev_mode_configuration():
    """vLLM serves /version; with VLLM_SERVER_DEV_MODE=1 /server_info?config_format=json its
    whole configuration (what vLLM's api_server serves: read with the search tool). A server
    that answers neither leaves the fingerprint to what detection read."""
    import httpx

    from redline.engine.telemetry.fingerprint import ask_server, fingerprint

    def vllm(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.9.2"})
        if request.url.path == "/server_info" and request.url.params.get("config_format") == "json":
            return httpx.Response(200, json={"vllm_config": {"scheduler_config": {"max_num_seqs": 16},
                                                             "parallel_config": {"tensor_parallel_size": 1}}})
        return httpx.Response(404)

    async with httpx.AsyncClient(transport=httpx.MockTransport(vllm)) as client:
        version, raw = await ask_server(client, "http://127.0.0.1:8000", "vllm", {})
    fp = fingerprint(kind="vllm", version=version, raw=raw, model="m", launch_command=["vllm", "serve", "m", "--max-num-seqs", "16"])
    assert fp["server"]["version"] == "0.9.2" and fp["server"]["args_from"] == "server"
    assert fp["server"]["args"]["scheduler_config.max_num_seqs"] == 16

    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(404))) as client:
        version, raw = await ask_server(client, "http://127.0.0.1:8000", "openai", {})
    assert (version, raw) == ("", {})


def test_an_unbounded_interval_reads_as_such_not_as_a_50_digit_number():
    """Two repeats a side give 1 degree of freedom: at Holm's level a TTFT p99's log-scale
    interval reached +1.3e50 % against real vLLM on 2 cores. The table says '>+1000', and the
    verdict stays 'no clear difference'."""
    from redline.engine.sweep.answers import comparison_table

    rows = [{"a": "n16", "b": "n4", "load": "C=1", "metric": "ttft_p99_ms", "change_pct": 265.0,
             "ci_pct": [-99.99, 1.3e50], "verdict": "no clear difference"},
            {"a": "n16", "b": "n4", "load": "C=4", "metric": "output_tok_s", "change_pct": -1.4,
             "ci_pct": [-4.2, 1.6], "verdict": "no clear difference"}]
    lines = comparison_table(rows)
    assert "-100..>+1000 %" in lines[2] and "e+" not in "".join(lines) and max(map(len, lines)) <= 80
    assert "-4.2..+1.6 %" in lines[3]


def test_a_figures_interval_never_reaches_below_zero():
    """Every point figure is a rate or a time: two repeats whose TTFT p99 read 615 and 85 ms
    (real vLLM on 2 cores) give a t interval that starts at 0, not at -3016 ms."""
    from redline.engine.sweep.points import points

    runs = [{"steps": [_step(1, 35.3, 25.9, p99=614.6, output_throughput_se=0.5)]},
            {"steps": [_step(1, 33.8, 28.6, p99=84.8, output_throughput_se=0.5)]}]
    (p,) = points(runs, gpus=None)
    assert p["ttft_p99_ms_ci"][0] == 0.0 and p["ttft_p99_ms_ci"][1] > 614.6
    assert 0 < p["output_tok_s_ci"][0] < 33.8  # a narrow one keeps its own low end
