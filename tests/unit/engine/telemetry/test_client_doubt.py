"""What could the client's own delay move (engine/telemetry/client_doubt.py)? A step that knows
its send waits (client_send_shift_ms) is judged by them, not by the loop's lag; kernel-stamped
reads only by the share of chunks a late loop read together."""

from __future__ import annotations

from redline.engine.telemetry.client_doubt import COALESCED_DOUBT, client_doubted

# C=1024 on the lockstep server: a 19 ms median TTFT, 45 ms p99 ITL; a second lagged 21 ms
STEP = {"median_ttft_ms": 19.0, "p99_ttft_ms": 40.0, "mean_ttft_ms": 20.0, "median_e2e_latency_ms": 2600.0,
        "p99_e2e_latency_ms": 2650.0, "median_itl_ms": 40.0, "p99_itl_ms": 45.0, "mean_tpot_ms": 40.5}


def test_a_step_whose_send_waits_moved_its_ttft_by_a_millisecond_is_not_doubted_for_a_21_ms_lag():
    assert client_doubted(STEP, 21.0, kernel_stamped=True)  # the lag alone: 21 ms of a 19 ms TTFT
    assert not client_doubted({**STEP, "client_send_shift_ms": 0.9}, 21.0, kernel_stamped=True)


def test_send_waits_that_moved_a_figure_by_a_tenth_or_across_its_limit_doubt_it_whatever_the_lag():
    assert client_doubted({**STEP, "client_send_shift_ms": 2.0}, 0.0, kernel_stamped=True)  # 2 ms of a 19 ms median
    near = {**STEP, "median_ttft_ms": 500.0, "mean_ttft_ms": 500.0, "p99_ttft_ms": 1001.0, "client_send_shift_ms": 2.0}
    assert client_doubted(near, 0.0, {"p99_ttft_ms": 1000.0}, kernel_stamped=True)  # 1 ms over its limit
    assert not client_doubted(near, 0.0, {"p99_ttft_ms": 900.0}, kernel_stamped=True)


def test_without_send_waits_the_lag_is_judged_and_an_unknown_lag_is_a_doubt():
    assert not client_doubted({**STEP, "client_send_shift_ms": None}, 0.0, kernel_stamped=True)  # no second suspect
    assert client_doubted({**STEP, "client_send_shift_ms": None}, 21.0, kernel_stamped=True)
    assert client_doubted({**STEP, "client_send_shift_ms": 0.5}, None, kernel_stamped=False)  # the loop stamped its ITL
    assert not client_doubted({**STEP, "client_send_shift_ms": 0.5}, None, kernel_stamped=True)  # waits known, reads the kernel's


def test_loop_stamped_reads_are_judged_by_the_lag_and_kernel_stamped_ones_by_their_coalesced_share():
    known = {**STEP, "client_send_shift_ms": 0.5}
    assert client_doubted(known, 21.0, kernel_stamped=False)  # 21 ms of a 40 ms ITL the loop stamped
    assert not client_doubted(known, 3.0, kernel_stamped=False)
    many = {**known, "coalesced_chunks": 2 * COALESCED_DOUBT}
    assert client_doubted(many, 21.0, kernel_stamped=True)  # the p99 of the gaps left need not be the step's
    assert not client_doubted({**known, "coalesced_chunks": COALESCED_DOUBT / 2}, 21.0, kernel_stamped=True)
    # where no second was suspect, reads that came together came so from the server (a proxy's buffering)
    assert not client_doubted(many, 0.0, kernel_stamped=True)
