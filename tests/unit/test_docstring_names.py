"""Every `*.py` a docstring or comment of engine/ and tui/ names exists: a reader sent to
"see ticker.py" finds it. A name resolves beside the file, under its package (engine/ or tui/),
from the checkout's root, or as the tail of a file of the checkout; a name of SGLang's source
(the files redline's sim and client were read from) must be one of SGLANG_FILES, each checked
against the 0.5.9 and 0.5.23 wheels' file lists when it was written."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from helpers import ROOT

PACKAGES = ("engine", "tui")
NAME = re.compile(r"(?<![\w.])((?:[\w-]+/)*[\w-]+\.py)\b")

# SGLang's files that redline's docstrings cite (sglang/ in `pip download --no-deps sglang==0.5.23`;
# srt/metrics/collector.py is 0.5.9's name of 0.5.23's srt/observability/metrics_collector.py)
SGLANG_FILES = frozenset({
    "sglang/srt/entrypoints/http_server.py",
    "sglang/srt/entrypoints/openai/serving_chat.py",
    "sglang/srt/entrypoints/openai/serving_completions.py",
    "sglang/srt/entrypoints/openai/sse_utils.py",
    "sglang/srt/entrypoints/openai/usage_processor.py",
    "sglang/srt/environ.py",
    "sglang/srt/managers/scheduler.py",
    "sglang/srt/managers/scheduler_components/flush_wrapper.py",
    "sglang/srt/managers/scheduler_components/internal_state.py",
    "sglang/srt/managers/scheduler_components/metrics_reporter.py",
    "sglang/srt/managers/scheduler_components/profiler_manager.py",
    "sglang/srt/managers/scheduler_metrics_mixin.py",
    "sglang/srt/managers/scheduler_pp_mixin.py",
    "sglang/srt/managers/scheduler_profiler_mixin.py",
    "sglang/srt/managers/scheduler_runtime_checker_mixin.py",
    "sglang/srt/managers/tokenizer_control_mixin.py",
    "sglang/srt/managers/tokenizer_manager.py",
    "sglang/srt/mem_cache/kv_cache_configurator.py",
    "sglang/srt/metrics/collector.py",
    "sglang/srt/model_executor/model_runner.py",
    "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
    "sglang/srt/observability/metrics_collector.py",
    "sglang/srt/server_args.py",
    "sglang/srt/utils/auth.py",
    "sglang/srt/utils/common.py",
})


def _checkout_files() -> set[str]:
    out = set()
    for pkg in (*PACKAGES, "tests", "benchmarks", "docs", ".ci"):
        out |= {p.relative_to(ROOT).as_posix() for p in (ROOT / pkg).rglob("*.py")}
    out |= {p.name for p in ROOT.glob("*.py")}
    return out


def _texts(path: Path):
    """(line, text) of each comment and each docstring (module, class, function) of a file."""
    src = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def _resolves(name: str, path: Path, files: set[str]) -> bool:
    rel = path.relative_to(ROOT)
    here = [(rel.parent / name).as_posix(), f"{rel.parts[0]}/{name}", name]
    return (any(h in files for h in here) or any(f.endswith("/" + name) for f in files)
            or any(f.endswith("/" + name) for f in SGLANG_FILES))


def _unresolved(files: set[str]) -> list[str]:
    bad = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for line, text in _texts(path):
                for m in NAME.finditer(text):
                    if not _resolves(m.group(1), path, files):
                        bad.append(f"{path.relative_to(ROOT)}:{line}: {m.group(1)}")
    return bad


def test_every_py_name_in_a_docstring_or_comment_exists():
    if not (ROOT / "engine").is_dir():
        pytest.skip("needs the checkout's sources (engine/, tui/)")
    assert _unresolved(_checkout_files()) == []


def test_a_rotten_name_is_caught(tmp_path):
    """The check reads comments and docstrings, and tells a moved file from one that is there."""
    files = _checkout_files()
    assert "engine/measure/log_bins.py" in files
    path = ROOT / "engine" / "measure" / "histogram.py"
    assert _resolves("log_bins.py", path, files) and _resolves("measure/log_bins.py", path, files)
    assert _resolves("serving_chat.py", path, files)  # SGLang's, on the list
    assert not _resolves("log_histogram.py", path, files)  # the name this module's docstring once had
    assert not _resolves("tests/test_engine_no_textual.py", path, files)


def test_every_sglang_name_on_the_list_is_still_cited():
    """SGLANG_FILES holds what a docstring cites, no more: an entry nothing names is dropped."""
    if not (ROOT / "engine").is_dir():
        pytest.skip("needs the checkout's sources (engine/, tui/)")
    cited = [m.group(1) for pkg in PACKAGES for path in (ROOT / pkg).rglob("*.py")
             for _, text in _texts(path) for m in NAME.finditer(text)]
    unused = [f for f in SGLANG_FILES if not any(f.endswith("/" + n) or f == n for n in cited)]
    assert unused == []
