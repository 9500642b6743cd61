"""The throughput rules judge steps against their own noise, and never judge unsteady steps."""

from redline.engine.measure.step_result import StepResult
from redline.engine.preset import StopSpec
from redline.engine.rules.verdicts import StopRules, noise_margin


def step(c, tok, se=None, steady=True):
    return StepResult(concurrency=c, duration_s=30, completed=50, failed=0, output_throughput=tok, input_throughput=0,
                      request_throughput=1, steady=steady, output_throughput_se=se)


RULES = StopRules(StopSpec(plateau_gain=0.05, collapse=0.2))


def test_margin_is_two_standard_errors_of_the_difference():
    assert noise_margin(step(8, 100, se=3.0), step(4, 80, se=4.0)) == 10.0
    assert noise_margin(step(8, 100), step(4, 80)) == 0.0


def test_a_gain_lost_in_the_noise_is_a_plateau_a_clear_one_is_not():
    best = step(32, 1000.0, se=20.0)
    # +8 %: above the 5 % threshold, but by less than the noise (2 x sqrt(20² + 20²) = 57 tok/s)
    assert RULES.evaluate([best], step(64, 1080.0, se=20.0)).reason == "plateau"
    # the same +8 % measured quietly is a real gain
    assert RULES.evaluate([best.__class__(**{**best.__dict__, "output_throughput_se": 1.0})], step(64, 1080.0, se=1.0)) is None
    assert RULES.evaluate([best], step(64, 1200.0, se=20.0)) is None


def test_a_collapse_must_be_a_drop_beyond_the_noise():
    best = step(32, 1000.0, se=60.0)
    assert RULES.evaluate([best], step(64, 780.0, se=60.0)).reason == "plateau"  # -22 %, within noise of -20 %
    assert RULES.evaluate([best], step(64, 500.0, se=60.0)).reason == "collapse"


def test_unsteady_steps_are_not_judged_by_throughput_rules():
    best = step(32, 1000.0)
    assert RULES.evaluate([best], step(64, 500.0, steady=False)) is None
    latency = StopRules(StopSpec(p99_ttft_ms=100, plateau_gain=0.05))
    slow = step(64, 500.0, steady=False)
    slow.p99_ttft_ms = 900.0
    assert latency.evaluate([best], slow).reason == "latency"  # other rules still apply
