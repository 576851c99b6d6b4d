"""The regression budget and each figure's noise (``amptool.stats.regression``), and the
budget's table in a config file: no trained network needed."""
from __future__ import annotations

import pytest
from amptool.errors import UsageError
from amptool.stats.counts import paired_drop_from_counts, wilson
from amptool.stats.regression import (P999_RESOLUTION, RegressionBudget, budget_from_table,
                                      count_change, counted_change, error_change)
from amptool.stats.sketch import GRID


def drop(lost: int, n: int) -> tuple:
    """An accuracy drop of ``lost`` samples in ``n`` (90 % right on the reference) and its
    95 % interval, as parity computes them."""
    right = int(0.9 * n)
    ci = paired_drop_from_counts(right - lost, lost, 0, n - right)
    return lost / n, ci


def agreement(flips: int, n: int) -> tuple:
    lo, hi = wilson(flips, n)
    return 1 - flips / n, [1 - hi, 1 - lo]


def test_a_drop_moving_within_its_interval_is_noise_and_beyond_it_a_regression():
    base, base_ci = drop(0, 359)
    for lost, status in ((1, "within noise"), (3, "within noise"), (12, "regressed")):
        new, new_ci = drop(lost, 359)
        change = counted_change(base, new, base_ci, new_ci, 359, True, 0.0)
        assert change.status == status, (lost, change)
    # the same 0.8 pp on 100,000 samples is far beyond the noise: the interval shrinks
    new, new_ci = drop(800, 100_000)
    base, base_ci = drop(0, 100_000)
    assert counted_change(base, new, base_ci, new_ci, 100_000, True, 0.0).status == "regressed"
    assert counted_change(new, base, new_ci, base_ci, 100_000, True, 0.0).status == "improved"


def test_the_noise_is_never_below_one_sample_and_the_allowance_adds_to_it():
    base, base_ci = agreement(0, 200)
    new, new_ci = agreement(1, 200)
    change = counted_change(base, new, None, None, 200, False, 0.0)  # no intervals recorded
    assert change.noise == pytest.approx(1 / 200) and change.status == "within noise"
    change = counted_change(base, new, base_ci, new_ci, 200, False, 0.0)
    assert change.noise > 1 / 200 and change.status == "within noise"
    far, far_ci = agreement(12, 200)
    assert counted_change(base, far, base_ci, far_ci, 200, False, 0.0).status == "regressed"
    assert counted_change(base, far, base_ci, far_ci, 200, False, 0.05).status == "within noise"
    assert counted_change(base, far, base_ci, far_ci, 200, False, None).status == "within noise"


def test_the_p999_resolution_is_the_sketchs_stated_bound():
    assert P999_RESOLUTION == pytest.approx(GRID.rel_bound, rel=1e-12, abs=1e-15)


def test_an_error_figure_within_the_sketchs_bound_is_noise_and_a_doubling_is_not():
    p999 = 3.6e-4
    near = error_change(p999, p999 * (1 + GRID.rel_bound / 2), GRID.rel_bound, 1e-5, 0.0)
    assert near.status == "within noise"
    assert error_change(p999, 2 * p999, GRID.rel_bound, 1e-5, 0.0).status == "regressed"
    assert error_change(p999, 2 * p999, GRID.rel_bound, 1e-5, 1.5).status == "within noise"
    assert error_change(2 * p999, p999, GRID.rel_bound, 1e-5, 0.0).status == "improved"
    # an fp32 candidate's errors sit at the reference's own rounding: below the floor
    assert error_change(1.9e-7, 3.8e-7, 0.0, 1e-5, 0.0).status == "within noise"
    assert error_change(p999, p999, 0.0, 1e-5, 0.0).status == "unchanged"


def test_a_figure_turned_nan_is_a_regression_and_one_turned_finite_an_improvement():
    nan = float("nan")
    assert error_change(1e-8, nan, 0.0, 0.0, 0.0).status == "regressed"
    assert error_change(1e-8, nan, 0.0, 0.0, None).status == "within noise"  # off
    assert error_change(nan, 1e-8, 0.0, 0.0, 0.0).status == "improved"
    assert error_change(nan, float("inf"), 0.0, 0.0, 0.0).status == "unchanged"
    assert count_change(0, 3, 0).status == "regressed"
    assert count_change(0, 3, 5).status == "within noise"
    assert count_change(3, 0, 0).status == "improved"


def test_the_budget_table_reports_every_bad_key_at_once():
    budget = budget_from_table({"error_growth": 0.5, "rate_allowance": "off",
                                "nonfinite_allowance": 2, "missing-candidates": False})
    assert budget == RegressionBudget(rate_allowance=None, error_growth=0.5,
                                      nonfinite_allowance=2, missing_candidates=False)
    with pytest.raises(UsageError) as caught:
        budget_from_table({"error_grow": 1, "error_floor": "off", "check_flips": 1,
                           "nonfinite_allowance": 1.5, "rate_allowance": -0.1}, "config c.toml")
    text = str(caught.value)
    for part in ("config c.toml: [regression] unknown key 'error_grow'",
                 "error_floor must be a number >= 0, got 'off'",
                 "check_flips must be true or false", "nonfinite_allowance must be a whole",
                 "rate_allowance must be a number >= 0 or off", "known keys: rate_allowance"):
        assert part in text
    with pytest.raises(UsageError, match="regression must be a table"):
        budget_from_table(3)


def test_parity_config_takes_the_regression_table_and_checks_it(tmp_path):
    from amptool.parity.config import ParityConfig

    good = tmp_path / "parity.toml"
    good.write_text("samples = 64\n[thresholds]\nmin_cosine = 0.9995\n"
                    "[regression]\nerror_growth = 0.25\n")
    assert ParityConfig.from_file(good, ["ref.mindir", "cand.mindir"]).samples == 64
    bad = tmp_path / "bad.toml"
    bad.write_text("[regression]\nerror_grwth = 0.25\n")
    with pytest.raises(UsageError, match="unknown key 'error_grwth'"):
        ParityConfig.from_file(bad, ["ref.mindir", "cand.mindir"])
