"""Stop rules: each fires on crafted steps, stays silent otherwise; precedence; last good."""

from __future__ import annotations

import pytest

from redline.engine.measure.step_result import BreakResult, StepResult
from redline.engine.preset import StopSpec, load_preset
from redline.engine.rules.verdicts import PRECEDENCE, StopRules, last_good

ALL = StopSpec(plateau_gain=0.05, p99_ttft_ms=10000, p99_itl_ms=500, error_rate=0.05, collapse=0.2)


def step(c, tps, *, completed=100, failed=0, ttft=1000.0, itl=50.0) -> StepResult:
    return StepResult(
        concurrency=c,
        duration_s=60.0,
        completed=completed,
        failed=failed,
        output_throughput=tps,
        input_throughput=tps / 2,
        request_throughput=completed / 60,
        p99_ttft_ms=ttft,
        p99_itl_ms=itl,
        steady=True,
        output_throughput_se=0.0,  # steady, so its noise was measured
    )


RISING = [step(32, 500), step(64, 900), step(96, 1300), step(128, 1950)]


def test_healthy_ramp_never_fires():
    rules = StopRules(ALL)
    for i, s in enumerate(RISING):
        assert rules.evaluate(RISING[:i], s) is None


def test_no_rules_never_fire():
    rules = StopRules(StopSpec())
    bad = step(256, 10, completed=1, failed=99, ttft=1e9, itl=1e9)
    assert rules.evaluate(RISING, bad) is None
    assert StopRules().evaluate(RISING, bad) is None


# --------------------------------------------------------------------- plateau


def test_plateau_fires_with_detail():
    r = StopRules(StopSpec(plateau_gain=0.05)).evaluate(RISING, step(192, 1985))
    assert r == BreakResult(
        reason="plateau",
        concurrency=192,
        last_good_concurrency=128,
        detail="plateau: 1985 tok/s at C=192 is +1.8 % over best 1950 tok/s (C=128), threshold +5 %",
    )


def test_plateau_silent_above_threshold_and_on_first_step():
    rules = StopRules(StopSpec(plateau_gain=0.05))
    assert rules.evaluate(RISING, step(192, 1950 * 1.06)) is None
    assert rules.evaluate(RISING, step(192, 1950 * 1.05)) is None  # not below: no fire
    assert rules.evaluate([], step(1, 0.0)) is None  # needs an earlier step


def test_plateau_compares_with_best_not_previous():
    hist = [step(32, 1000), step(64, 2000), step(96, 1500)]
    # 2050 is well over the previous step (1500) but only +2.5 % over the best (2000)
    r = StopRules(StopSpec(plateau_gain=0.05)).evaluate(hist, step(128, 2050))
    assert r is not None and r.reason == "plateau" and "best 2000 tok/s (C=64)" in r.detail


def test_plateau_gain_zero_fires_only_when_not_improving():
    rules = StopRules(StopSpec(plateau_gain=0.0))
    assert rules.evaluate(RISING, step(192, 1951)) is None
    assert rules.evaluate(RISING, step(192, 1949)).reason == "plateau"


# -------------------------------------------------------------------- latency


def test_latency_ttft():
    r = StopRules(StopSpec(p99_ttft_ms=10000)).evaluate(RISING, step(192, 3000, ttft=12500))
    assert r.reason == "latency" and r.concurrency == 192
    assert r.detail == "latency: p99 TTFT 12500 ms over limit 10000 ms at C=192"
    assert r.last_good_concurrency == 128


def test_latency_itl_and_both():
    rules = StopRules(StopSpec(p99_ttft_ms=10000, p99_itl_ms=500))
    r = rules.evaluate(RISING, step(192, 3000, itl=750))
    assert r.reason == "latency" and "p99 ITL 750 ms over limit 500 ms" in r.detail
    r = rules.evaluate(RISING, step(192, 3000, ttft=20000, itl=750))
    assert "TTFT" in r.detail and "ITL" in r.detail and "\n" not in r.detail


def test_latency_silent_at_limit_and_without_data():
    rules = StopRules(StopSpec(p99_ttft_ms=10000, p99_itl_ms=500))
    assert rules.evaluate(RISING, step(192, 3000, ttft=10000, itl=500)) is None
    assert rules.evaluate(RISING, step(192, 3000, ttft=None, itl=None)) is None


# --------------------------------------------------------------------- errors


def test_errors_fire_over_limit():
    r = StopRules(StopSpec(error_rate=0.05)).evaluate(RISING, step(192, 3000, completed=90, failed=10))
    assert r.reason == "errors" and r.concurrency == 192
    assert r.detail == "errors: 10 of 100 requests failed (10.0 %) at C=192, limit 5 %"
    assert r.last_good_concurrency == 128


def test_errors_silent_at_limit_and_with_no_requests():
    rules = StopRules(StopSpec(error_rate=0.05))
    assert rules.evaluate(RISING, step(192, 3000, completed=95, failed=5)) is None  # 5 % is not over
    assert rules.evaluate(RISING, step(192, 3000, completed=0, failed=0)) is None


def test_error_rate_zero_fires_on_any_failure():
    rules = StopRules(StopSpec(error_rate=0.0))
    assert rules.evaluate([], step(1, 10, completed=999, failed=1)).reason == "errors"
    assert rules.evaluate([], step(1, 10, completed=999, failed=0)) is None


def test_all_failed_no_earlier_step():
    r = StopRules(StopSpec(error_rate=0.05)).evaluate([], step(32, 0.0, completed=0, failed=40))
    assert r.reason == "errors" and r.last_good_concurrency is None


# ------------------------------------------------------------------- collapse


def test_collapse():
    r = StopRules(StopSpec(collapse=0.2)).evaluate(RISING, step(192, 1200))
    assert r.reason == "collapse" and r.concurrency == 192 and r.last_good_concurrency == 128
    assert r.detail == (
        "collapse: 1200 tok/s at C=192 is -38.5 % from best 1950 tok/s (C=128), threshold -20 %"
    )


def test_collapse_silent_for_small_drop_and_first_step():
    rules = StopRules(StopSpec(collapse=0.2))
    assert rules.evaluate(RISING, step(192, 1950 * 0.85)) is None
    assert rules.evaluate(RISING, step(192, 1950 * 0.8)) is None  # exactly -20 % is not below
    assert rules.evaluate([], step(32, 0.0)) is None


# ---------------------------------------------------------------- server gone


def test_server_gone_always_on():
    r = StopRules(StopSpec()).evaluate(RISING, step(192, 2500), server_gone=True)
    assert r.reason == "server_gone" and r.concurrency == 192
    assert r.last_good_concurrency == 128  # the step the server died in is not good
    assert "\n" not in r.detail and "C=192" in r.detail


def test_server_gone_without_current_step():
    r = StopRules(ALL).evaluate(RISING, None, server_gone=True)
    assert r.reason == "server_gone" and r.concurrency == 128 and r.last_good_concurrency == 128
    r = StopRules(ALL).evaluate([], None, server_gone=True)
    assert r.reason == "server_gone" and r.concurrency == 0 and r.last_good_concurrency is None
    with pytest.raises(ValueError):
        StopRules(ALL).evaluate(RISING, None)


# ------------------------------------------------------------------ precedence


def test_precedence_order():
    assert PRECEDENCE == ("server_gone", "errors", "latency", "slo", "collapse", "plateau")
    rules = StopRules(ALL)
    worst = step(192, 100, completed=50, failed=50, ttft=99999, itl=9999)
    assert rules.evaluate(RISING, worst, server_gone=True).reason == "server_gone"
    r = rules.evaluate(RISING, worst)
    assert r.reason == "errors"
    assert "(also: latency, collapse, plateau)" in r.detail
    assert rules.evaluate(RISING, step(192, 100, ttft=99999)).reason == "latency"
    # a collapse is always a plateau too; collapse wins
    r = rules.evaluate(RISING, step(192, 100))
    assert r.reason == "collapse" and r.detail.endswith("(also: plateau)")
    assert rules.evaluate(RISING, step(192, 1960)).reason == "plateau"


def test_fired_lists_all_in_order():
    rules = StopRules(ALL)
    fired = rules.fired(RISING, step(192, 100, completed=50, failed=50, ttft=99999))
    assert [r for r, _ in fired] == ["errors", "latency", "collapse", "plateau"]


# ------------------------------------------------------------------ last good


def test_last_good_is_highest_throughput_not_last():
    hist = [step(32, 1000), step(64, 2000), step(96, 1900)]
    # 96 dipped (under the 5 % plateau, the runner would have stopped, but with only
    # collapse on it is fine): the best good step is 64
    rules = StopRules(StopSpec(collapse=0.2))
    r = rules.evaluate(hist, step(128, 1000))
    assert r.reason == "collapse" and r.last_good_concurrency == 64


def test_last_good_skips_steps_that_broke_a_rule():
    # the 96 step had the highest throughput but failed 10 %: it is not good
    hist = [step(32, 1000), step(64, 2000), step(96, 2600, completed=90, failed=10)]
    rules = StopRules(StopSpec(error_rate=0.05, collapse=0.2))
    assert rules.last_good(hist).concurrency == 64
    r = rules.evaluate(hist, step(128, 1000))
    assert r.last_good_concurrency == 64


def test_last_good_can_be_the_current_step_is_never_the_firing_one():
    rules = StopRules(StopSpec(p99_ttft_ms=1000))
    hist = [step(8, 100, ttft=100)]
    r = rules.evaluate(hist, step(16, 500, ttft=2000))
    assert r.last_good_concurrency == 8  # 16 had more tok/s but broke the latency rule


def test_last_good_ties_go_to_lower_concurrency():
    assert last_good([step(64, 1000), step(32, 1000)]).concurrency == 32


def test_last_good_helper():
    assert last_good([]) is None
    assert last_good(RISING).concurrency == 128
    assert last_good(RISING, ALL).concurrency == 128
    assert last_good(RISING + [step(192, 1960)], ALL).concurrency == 128  # plateau step excluded
    assert last_good(RISING + [step(192, 1960)]).concurrency == 192  # no rules: best step
    assert last_good(RISING, StopRules(ALL)).concurrency == 128


def test_shipped_until_it_breaks_on_the_story():
    """The staircase from the design story: throughput flattens at C=192."""
    p = load_preset(ROOT / "presets" / "until-it-breaks.toml")
    rules = StopRules(p.stop)
    steps = [step(32, 900), step(64, 1500), step(96, 1800), step(128, 1950), step(192, 1985)]
    for i, s in enumerate(steps[:-1]):
        assert rules.evaluate(steps[:i], s) is None
    r = rules.evaluate(steps[:-1], steps[-1])
    assert (r.reason, r.concurrency, r.last_good_concurrency) == ("plateau", 192, 128)
    assert r.to_dict()["reason"] == "plateau"


# ---------------------------------------------------------------- property


from hypothesis import (  # noqa: E402
    given,
    settings,
    strategies as st,  # noqa: E402
)

from helpers import ROOT

STEP = st.builds(
    step,
    st.integers(1, 512),
    st.floats(0, 1e5),
    completed=st.integers(0, 500),
    failed=st.integers(0, 500),
    ttft=st.one_of(st.none(), st.floats(0, 1e5)),
    itl=st.one_of(st.none(), st.floats(0, 1e4)),
)
SPEC = st.builds(
    StopSpec,
    plateau_gain=st.one_of(st.none(), st.floats(0, 1)),
    p99_ttft_ms=st.one_of(st.none(), st.floats(1, 1e5)),
    p99_itl_ms=st.one_of(st.none(), st.floats(1, 1e4)),
    error_rate=st.one_of(st.none(), st.floats(0, 0.99)),
    collapse=st.one_of(st.none(), st.floats(0.01, 0.99)),
)


@settings(max_examples=300, deadline=None)
@given(SPEC, st.lists(STEP, max_size=6), STEP, st.booleans())
def test_evaluate_properties(spec, hist, cur, gone):
    rules = StopRules(spec)
    r = rules.evaluate(hist, cur, server_gone=gone)
    if gone:
        assert r is not None and r.reason == "server_gone"
    if r is None:
        return
    assert r.reason in PRECEDENCE and r.concurrency == cur.concurrency
    assert "\n" not in r.detail and r.detail.startswith(r.reason + ":")
    good = rules.good_steps(hist if gone else hist + [cur])
    if r.last_good_concurrency is None:
        assert not good
    else:
        assert r.last_good_concurrency in {s.concurrency for s in good}
        assert max(s.output_throughput for s in good) == max(
            s.output_throughput for s in good if s.concurrency == r.last_good_concurrency
        )
