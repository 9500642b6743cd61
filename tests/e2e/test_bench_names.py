"""Issue 46, cases 1 and 2: what a bench_serving / `vllm bench serve` user types works where
redline has the same thing (--request-rate, --num-prompts, --save-result, --result-filename,
--sharegpt-output-len, ...), the refusal of another tool's name names ours ahead of any near
spelling, `redline export --format json` writes one document, and a ShareGPT file is read as
bench_serving reads it (each conversation's first human turn, max_tokens its reply's length,
too-short and too-long pairs left out), checked against what the sim generated."""

from __future__ import annotations

import json
import math
import re

import httpx
import pytest

from redline.tui.cli.arguments import build_parser

from helpers import main_in_process


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- 1. bench_serving's names --------------------------------------------------------------------
@pytest.mark.parametrize("argv, dest, value", [
    (["--request-rate", "5"], "rate", 5.0),
    (["--num-prompts", "200"], "num_requests", 200),
    (["--base-url", "http://127.0.0.1:30000"], "url", ["http://127.0.0.1:30000"]),
    (["--random-input-len", "1024"], "input_len", 1024),
    (["--random-output-len", "256"], "output_len", 256),
    (["--disable-ignore-eos"], "ignore_eos", False),
    (["--metric-percentiles", "50,99"], "percentiles", (50.0, 99.0)),
    (["--save-result"], "save_result", True),
    (["--sharegpt-output-len", "64"], "sharegpt_output_len", 64),
    (["--sharegpt-context-len", "4096"], "sharegpt_context_len", 4096),
    (["run", "quick", "--max-concurrency", "64"], "max_concurrency", 64),
    (["run", "quick", "--sharegpt-output-len", "64"], "sharegpt_output_len", 64),
    (["run", "quick", "--save-result"], "save_result", True),
])
def test_bench_serving_spellings_are_redlines_options(argv, dest, value):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value


def test_result_filename_is_a_path_on_redline_and_run(tmp_path):
    for argv in (["--result-filename", "r.json"], ["run", "quick", "--result-filename", "r.json"]):
        assert str(build_parser().parse_args(argv).result_filename) == "r.json"


@pytest.mark.parametrize("argv, needles, not_in", [
    (["--qps", "5"], ("'--qps'", "--rate", "--request-rate"), "--slo"),
    (["--output-json", "x.json"], ("'--output-json'", "--result-filename"), "--output-len"),
    (["--output-file", "x.json"], ("'--output-file'", "--result-filename"), "--output-len"),
    (["--dataset-name", "sharegpt"], ("--dataset", "sharegpt:PATH"), "--dataset-name?"),
    (["--host", "10.0.0.1"], ("--url", "http://HOST:PORT"), "--headless"),
    # `run` has no --concurrency: the near spelling is redline's, not run's --max-concurrency
    (["run", "quick", "--concurency", "8"], ("did you mean --concurrency?", "not of redline run"), "--max-concurrency"),
    (["run", "quick", "--qps", "3"], ("--rate", "not of redline run"), "--slo"),
    (["--num_prompts", "5"], ("did you mean --num-prompts?",), "--num-requests?"),
])
def test_another_tools_name_is_answered_with_ours(nothing_starts, capsys, argv, needles, not_in):
    rc = main_in_process(argv)
    out = capsys.readouterr()
    assert rc == 2 and out.out == "" and nothing_starts == []
    line = one_line(out.err)
    assert "unknown option" in line and all(n in line for n in needles), line
    assert not_in not in line, line


def test_bench_servings_infinite_rate_says_what_it_is_here(nothing_starts, capsys):
    assert main_in_process(["--request-rate", "inf"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "'inf'" in line and "closed loop" in line and "--concurrency N" in line


@pytest.mark.parametrize("argv, needle", [
    (["--sharegpt-output-len", "8"], "--sharegpt-output-len 8: for a ShareGPT dataset"),
    (["--sharegpt-context-len", "8", "--dataset", "random"], "--sharegpt-context-len 8: for a ShareGPT dataset"),
])
def test_sharegpt_options_without_sharegpt_are_refused(nothing_starts, capsys, argv, needle):
    assert main_in_process(argv) == 2
    assert needle in one_line(capsys.readouterr().err)


def test_result_filename_in_a_missing_folder_is_refused_before_anything_starts(nothing_starts, capsys, tmp_path):
    assert main_in_process(["--headless", "--result-filename", str(tmp_path / "no" / "r.json"), "--out", str(tmp_path / "s")]) == 2
    line = one_line(capsys.readouterr().err)
    assert "--result-filename" in line and "does not exist" in line
    assert nothing_starts == [] and not (tmp_path / "s").exists()


# -- export --format json --------------------------------------------------------------------------
def _session(tmp_path):
    from redline.engine.session import SessionWriter

    d = tmp_path / "s"
    w = SessionWriter(d, {"label": "t", "percentiles": [50, 99]})
    for i in range(5):
        w.add_request({"rid": i, "phase": "measure", "step": 0, "concurrency": 4, "t_send": 1.7e9 + i,
                       "ttft_ms": 50.0 + i, "e2e_ms": 900.0, "input_tokens": 10, "output_tokens": 16,
                       "status": "ok" if i else "failed", "error_kind": "" if i else "http_503"})
    w.add_timeline({"t": 1.7e9, "elapsed_s": 0.0, "state": "running", "target_c": 4, "in_flight": 4,
                    "output_tok_s": float("nan")})
    w.add_event("key", "C 1 -> 4", concurrency=4)
    w.close("quit")
    (d / "summary.json").write_text(json.dumps({"steps": [{"concurrency": 4, "output_throughput": 12.5,
                                                           "profiles": [{"x": 1}]}]}))
    return d


def test_export_json_is_one_document_of_the_whole_session(tmp_path, capsys):
    d = _session(tmp_path)
    assert main_in_process(["export", str(d), "--format", "json", "-o", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / "out" / "session.json")]
    doc = json.loads((tmp_path / "out" / "session.json").read_text())  # strict JSON: NaN is null
    assert set(doc) == {"meta", "summary", "requests", "timeline", "events", "steps"}
    assert doc["meta"]["label"] == "t" and doc["summary"]["steps"][0]["output_throughput"] == 12.5
    assert [r["rid"] for r in doc["requests"]] == [0, 1, 2, 3, 4]
    assert [r["status"] for r in doc["requests"]].count("failed") == 1
    assert doc["timeline"][0]["output_tok_s"] is None and doc["timeline"][0]["target_c"] == 4
    assert any(e["text"] == "C 1 -> 4" for e in doc["events"])
    assert doc["steps"] == [{"concurrency": 4, "output_throughput": 12.5}]  # flat, as steps.csv
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["session.json"]


def test_export_format_choices_are_the_exporters():
    import argparse

    from redline.engine.report.export import EXPORT_FORMATS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    export = sub.choices["export"]
    export.format_help()  # its arguments are added when first used
    action = next(a for a in export._actions if "--format" in a.option_strings)
    assert tuple(action.choices) == EXPORT_FORMATS


# -- 2. ShareGPT as bench_serving reads it ------------------------------------------------------------
def _conv(human: str, reply: str | None, first: str = "human") -> dict:
    turns = [{"from": first, "value": human}]
    if reply is not None:
        turns.append({"from": "gpt", "value": reply})
    return {"id": human[:8], "conversations": turns}


def _sharegpt_file(tmp_path):
    data = [
        _conv("question alpha " + "a" * 40, "r" * 200),   # 200 chars: 50 of the sim's tokens
        _conv("question beta " + "b" * 40, "s" * 36),     # 9
        _conv("question gamma " + "c" * 80, "t" * 400),   # 100
        {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "question delta " + "d" * 40},
                           {"from": "gpt", "value": "u" * 80}]},  # the first human turn, after a system turn: 20
        _conv("question eps " + "e" * 40, "ok"),         # a reply of one token: too short, left out
        _conv("question zeta " + "f" * 40, None),         # no reply: fewer than two turns, left out
    ]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(data))
    return f


def test_sharegpt_asks_each_replys_length_and_leaves_out_what_bench_serving_does(tmp_path):
    from redline.engine.workload.prompts import Calibration, WorkloadConfig, calibration_chars_per_word, load_dataset

    f = _sharegpt_file(tmp_path)
    cpw = calibration_chars_per_word()
    cal = Calibration(overhead=5.0, per_word=cpw / 4.0, measured=True)  # a server of 4 characters a token
    items = load_dataset(f"sharegpt:{f}", 128, cal, WorkloadConfig(dataset=f"sharegpt:{f}", seed=3))
    got = {p.text.split()[1]: p.max_tokens for p in items}
    assert got == {"alpha": 50, "beta": 9, "gamma": 100, "delta": 20}
    again = load_dataset(f"sharegpt:{f}", 128, cal, WorkloadConfig(dataset=f"sharegpt:{f}", seed=3))
    assert [p.text for p in again] == [p.text for p in items]  # shuffled by the seed: the same seed, the same order
    fixed = load_dataset(f"sharegpt:{f}", 128, cal, WorkloadConfig(dataset=f"sharegpt:{f}", sharegpt_output_len=7))
    assert sorted(p.max_tokens for p in fixed) == [7] * 5  # the short reply counts no more; no reply still out
    ctx = load_dataset(f"sharegpt:{f}", 128, cal, WorkloadConfig(dataset=f"sharegpt:{f}", sharegpt_context_len=40))
    # prompts of 14-24 tokens: alpha (14 + 50) and gamma (24 + 100) pass 40 tokens and are left out
    assert sorted(p.text.split()[1] for p in ctx) == ["beta", "delta"]


def test_a_sharegpt_file_whose_pairs_are_all_left_out_says_why(tmp_path):
    from redline.engine.workload.prompts import WorkloadConfig, WorkloadError, load_dataset

    f = tmp_path / "short.json"
    f.write_text(json.dumps([_conv("hi there, a question", "ok"), _conv("again a question here", "no")]))
    with pytest.raises(WorkloadError, match=r"all 2 conversations left out \(prompt or reply shorter than 2 tokens\)"):
        load_dataset(f"sharegpt:{f}", 128, config=WorkloadConfig(dataset=f"sharegpt:{f}"))


@pytest.mark.parametrize("extra, expect", [
    ((), "reply"),                                       # each request asks its reply's length
    (("--sharegpt-output-len", "12"), 12),               # fixed
    (("--output-len", "10"), 10),                        # --output-len given with ShareGPT: fixed too
])
def test_the_sim_generates_each_replys_length(sim_factory, tmp_path, extra, expect):
    """Ground truth: the sim streams exactly max_tokens (ignore_eos), and counts a text as one
    token per four characters; what it generated for each prompt is its reply's length in the
    sim's tokens, within the estimate's rounding."""
    sim = sim_factory("healthy", 0, ("--set", "decode_base_s=0.002", "--set", "decode_per_seq_s=0.00001"))
    f = _sharegpt_file(tmp_path)
    rc = main_in_process(["--headless", "--url", sim.url, "--no-nvml", "--dataset", f"sharegpt:{f}", "-c", "2",
                          "--num-prompts", "8", "--out", str(tmp_path / "s"), *extra])
    assert rc == 0
    ours = re.compile(r"question (alpha|beta|gamma|delta|eps|zeta) ")  # the calibration's random words hold "question" too
    sent = [r for r in httpx.get(sim.url + "/sim/requests", params={"text": "1"}, timeout=10).json()
            if r["prompt_tail"] and ours.search(r["prompt_tail"])]
    assert len(sent) == 8
    replies = {"alpha": 200, "beta": 36, "gamma": 400, "delta": 80, "eps": 2}
    for r in sent:
        word = next(w for w in replies if f"question {w}" in r["prompt_tail"])
        want = math.ceil(replies[word] / 4) if expect == "reply" else expect
        assert abs(r["tokens"] - want) <= max(1, want // 20), (word, r["tokens"], want)
    assert not any("question zeta" in r["prompt_tail"] for r in sent)  # no reply: never sent
    assert any("question eps" in r["prompt_tail"] for r in sent) == (expect != "reply")  # a one-token reply: too short
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert json.dumps(meta).count("sharegpt_output_len") >= 1


def test_closest_ranks_a_known_alias_above_a_near_spelling():
    from redline.engine.text import closest

    # difflib alone: `openai-chat` is near nothing; `jsonl` nearer json than ndjson
    assert closest("openai-chat", ("chat", "completions", "generate")) is None
    assert closest("jsonl", ("parquet", "csv", "ndjson", "json")) == "json"
    aliases = {"openai-chat": "chat", "jsonl": "ndjson"}
    assert closest("openai-chat", ("chat", "completions", "generate"), aliases=aliases) == "chat"
    assert closest("JSONL", ("parquet", "csv", "ndjson", "json"), aliases=aliases) == "ndjson"
    assert closest("chta", ("chat", "completions"), aliases=aliases) == "chat"  # a typo still finds its word
    assert closest("jsonl", ("parquet", "csv"), aliases=aliases) is None  # an alias of no choice here is nothing


@pytest.mark.parametrize("argv, near", [
    (["--api", "openai-chat"], "did you mean chat?"),
    (["--api", "sglang"], "did you mean generate?"),  # bench_serving's --backend sglang: SGLang's /generate
    (["export", "x", "--format", "jsonl"], "did you mean ndjson?"),
])
def test_another_tools_value_names_ours(nothing_starts, capsys, argv, near):
    assert main_in_process(argv) == 2
    assert near in one_line(capsys.readouterr().err)
