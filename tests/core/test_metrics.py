"""Parity metrics on known arrays, pass/fail rows, threshold layering and flag parsing."""
import math

import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.metrics import (
    FP16_VS_FP32,
    SAME_PRECISION,
    Thresholds,
    check_metrics,
    compute_metrics,
    flag_overrides,
    parse_limit,
    passed,
    resolve_thresholds,
    validate_file_thresholds,
)


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------- compute_metrics

def test_identical_outputs():
    ref = np.array([[3.0, 4.0], [1.0, -2.0]], np.float32)
    m = compute_metrics(ref, ref.copy())
    assert m["cosine"] == pytest.approx(1.0, abs=1e-12)
    assert m["max_abs"] == 0.0 and m["max_rel"] == 0.0 and m["rel_l2"] == 0.0
    assert m["rmse"] == 0.0 and m["outside_frac"] == 0.0 and m["nonfinite"] == 0
    assert m["top1_agree"] == 1.0


def test_known_differences():
    ref = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    cand = ref + np.array([[0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    m = compute_metrics(ref, cand.astype(np.float32))
    assert m["max_abs"] == pytest.approx(0.5)
    assert m["max_rel"] == pytest.approx(0.5 / (3.0 + 1e-6))
    assert m["mean_abs"] == pytest.approx(0.5 / 6)
    assert m["rmse"] == pytest.approx(math.sqrt(0.25 / 6))
    assert m["rel_l2"] == pytest.approx(0.5 / math.sqrt(28.0))
    expected_cos = float(ref.ravel() @ cand.ravel()) / (np.linalg.norm(ref) * np.linalg.norm(cand))
    assert m["cosine"] == pytest.approx(expected_cos, rel=1e-12)
    assert m["cosine"] < 1.0
    assert m["outside_frac"] == pytest.approx(1 / 6)
    assert m["top1_agree"] == 1.0


def test_orthogonal_and_zero_vectors():
    assert compute_metrics(np.array([1.0, 0.0]), np.array([0.0, 1.0]))["cosine"] == 0.0
    assert compute_metrics(np.zeros(3), np.zeros(3))["cosine"] == 1.0
    zero_cand = compute_metrics(np.ones(3), np.zeros(3))
    assert zero_cand["cosine"] == 0.0 and zero_cand["rel_l2"] == pytest.approx(1.0)
    # rel_l2 with a zero reference falls back to the absolute L2 norm
    assert compute_metrics(np.zeros(2), np.array([3.0, 4.0]))["rel_l2"] == pytest.approx(5.0)


def test_outside_fraction_uses_atol_and_rtol():
    ref = np.ones(4)
    cand = np.array([1.0, 1.0005, 1.02, 2.0])   # limit is 1e-3 + 1e-2 * 1 = 0.011
    assert compute_metrics(ref, cand)["outside_frac"] == pytest.approx(0.5)
    assert compute_metrics(ref, cand, atol=0.5, rtol=0.0)["outside_frac"] == pytest.approx(0.25)


def test_top1_agreement_and_accuracy_drop():
    ref = np.array([[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [2.0, 1.0]])
    cand = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [2.0, 1.0]])
    labels = np.array([1, 0, 0, 0])
    m = compute_metrics(ref, cand, labels)
    assert m["top1_agree"] == pytest.approx(0.75)
    assert m["ref_acc"] == pytest.approx(0.75)
    assert m["cand_acc"] == pytest.approx(0.5)
    assert m["acc_drop"] == pytest.approx(0.25)
    no_labels = compute_metrics(ref, cand)
    assert "acc_drop" not in no_labels and "ref_acc" not in no_labels


def test_no_top1_for_non_classifier_outputs():
    assert "top1_agree" not in compute_metrics(np.ones(5), np.ones(5))
    assert "top1_agree" not in compute_metrics(np.ones((4, 1)), np.ones((4, 1)))


def test_nonfinite_candidate():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    cand = np.array([[1.0, np.nan], [np.inf, 4.0]], np.float16)
    m = compute_metrics(ref, cand)
    assert m["nonfinite"] == 2
    assert math.isnan(m["cosine"])
    assert m["max_abs"] == math.inf and m["rel_l2"] == math.inf
    assert m["outside_frac"] == pytest.approx(0.5)


def test_shape_mismatch():
    with pytest.raises(UsageError) as err:
        compute_metrics(np.ones((2, 3)), np.ones((3, 2)))
    assert "(2, 3)" in _one_line(err) and "(3, 2)" in str(err.value)


# ---------------------------------------------------------------- check_metrics

GOOD = {"nonfinite": 0, "cosine": 0.99999, "max_abs": 1e-5, "max_rel": 1e-4, "outside_frac": 0.0,
        "top1_agree": 1.0, "acc_drop": 0.0}
STRICT = Thresholds(min_cosine=0.9999, min_top1=1.0, max_acc_drop=0.001, max_abs=1e-4,
                    max_rel=1e-3, max_outside=0.01)


def test_all_rows_pass():
    rows = check_metrics(GOOD, STRICT)
    assert [r["metric"] for r in rows] == ["nonfinite", "cosine", "max_abs", "max_rel",
                                           "outside_frac", "top1_agree", "acc_drop"]
    assert all(r["passed"] for r in rows) and passed(rows)
    assert {r["metric"]: r["limit"] for r in rows}["cosine"] == ">= 0.9999"


@pytest.mark.parametrize("metric,bad", [
    ("nonfinite", 3), ("cosine", 0.99), ("cosine", float("nan")), ("max_abs", 1e-3),
    ("max_rel", 0.5), ("outside_frac", 0.2), ("top1_agree", 0.98), ("acc_drop", 0.01),
    ("max_abs", float("inf")),
])
def test_planted_error_fails_its_row(metric, bad):
    rows = check_metrics({**GOOD, metric: bad}, STRICT)
    failed = [r["metric"] for r in rows if not r["passed"]]
    assert failed == [metric]
    assert not passed(rows)


def test_limit_boundaries():
    th = Thresholds(max_acc_drop=0.005, min_top1=0.99)
    rows = check_metrics({**GOOD, "acc_drop": 0.7 - 0.695, "top1_agree": 0.99}, th)
    assert passed(rows)   # a drop equal to the budget passes despite float rounding


def test_disabled_limits_and_allowed_nonfinite():
    th = Thresholds(min_cosine=None, min_top1=None, max_acc_drop=None, allow_nonfinite=True)
    rows = check_metrics({**GOOD, "nonfinite": 5, "cosine": float("nan")}, th)
    assert rows == []


def test_real_planted_error_end_to_end():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((8, 10)).astype(np.float32)
    labels = ref.argmax(axis=1)
    close = ref.astype(np.float16).astype(np.float32)
    assert passed(check_metrics(compute_metrics(ref, close, labels), FP16_VS_FP32))
    broken = close.copy()
    broken[3, labels[3]] -= 50.0   # flips one prediction
    rows = check_metrics(compute_metrics(ref, broken, labels), FP16_VS_FP32)
    failed = {r["metric"] for r in rows if not r["passed"]}
    assert failed == {"cosine", "top1_agree", "acc_drop"}
    assert not passed(check_metrics(compute_metrics(ref, close, labels), SAME_PRECISION))


# ---------------------------------------------------------------- resolve_thresholds

def test_defaults_per_pair():
    assert resolve_thresholds("fp32", "fp32") == SAME_PRECISION
    assert resolve_thresholds("fp32", "fp16") == FP16_VS_FP32
    assert resolve_thresholds(None, None) == FP16_VS_FP32
    assert SAME_PRECISION.max_abs == 1e-4 and FP16_VS_FP32.max_abs is None


TABLE = {"min_cosine": 0.9, "max_rel": 0.5,
         "fp16_vs_fp32": {"min_cosine": 0.95, "max_abs": "off"},
         "same_precision": {"min_cosine": 0.999999, "max_abs": 1e-6}}


def test_file_table_then_pair_table():
    fp16 = resolve_thresholds("fp32", "fp16", TABLE)
    assert fp16.min_cosine == 0.95 and fp16.max_rel == 0.5 and fp16.max_abs is None
    assert fp16.min_top1 == FP16_VS_FP32.min_top1
    same = resolve_thresholds("fp32", "fp32", TABLE)
    assert same.min_cosine == 0.999999 and same.max_abs == 1e-6 and same.max_rel == 0.5
    assert same.min_top1 == 1.0
    general_only = resolve_thresholds("fp32", "fp16", {"min_cosine": 0.9})
    assert general_only.min_cosine == 0.9


def test_flags_win_over_file():
    flags = flag_overrides(min_cosine="0.5", max_rel="off", allow_nonfinite=True)
    th = resolve_thresholds("fp32", "fp16", TABLE, flags)
    assert th.min_cosine == 0.5 and th.max_rel is None and th.allow_nonfinite is True
    assert th.min_top1 == FP16_VS_FP32.min_top1


def test_off_in_file_and_errors():
    assert resolve_thresholds("fp32", "fp32", {"max_abs": "OFF"}).max_abs is None
    with pytest.raises(UsageError, match="atol cannot be off"):
        resolve_thresholds("fp32", "fp16", {"atol": "off"})
    with pytest.raises(UsageError, match="unknown threshold"):
        resolve_thresholds("fp32", "fp16", {"min_cos": 0.9})
    with pytest.raises(UsageError, match="must be a number or off"):
        resolve_thresholds("fp32", "fp16", {"fp16_vs_fp32": {"min_cosine": "high"}})


# ---------------------------------------------------------------- parse_limit / flag_overrides

def test_parse_limit():
    assert parse_limit("0.999", "min_cosine") == 0.999
    assert parse_limit("1e-3", "max_abs") == 0.001
    assert parse_limit("off", "max_abs") is None
    assert parse_limit("None", "min_top1") is None
    assert parse_limit(None, "max_abs") is not None   # the 'unset' sentinel, dropped later


def test_parse_limit_errors():
    with pytest.raises(UsageError) as err:
        parse_limit("abc", "min_cosine")
    assert "--min-cosine takes a number or 'off', got 'abc'" in _one_line(err)
    with pytest.raises(UsageError) as err:
        parse_limit("off", "atol")
    assert "--atol cannot be off" in _one_line(err)


def test_flag_overrides():
    got = flag_overrides(min_cosine="0.9", max_abs=None, max_rel="off", allow_nonfinite=False,
                         rtol="0.1")
    assert got == {"min_cosine": 0.9, "max_rel": None, "rtol": 0.1}
    assert flag_overrides(allow_nonfinite=True) == {"allow_nonfinite": True}
    with pytest.raises(UsageError, match="--max-abs"):
        flag_overrides(max_abs="1e-3x")


# ---------------------------------------------------------------- validate_file_thresholds

def test_validate_file_thresholds_accepts_good_table():
    assert validate_file_thresholds(TABLE, "cfg.toml") is TABLE
    assert validate_file_thresholds({}, "cfg.toml") == {}


@pytest.mark.parametrize("table,needle", [
    ([1, 2], "thresholds must be a table"),
    ({"fp16_vs_fp32": 0.9}, "thresholds.fp16_vs_fp32 must be a table"),
    ({"same_precision": [1]}, "thresholds.same_precision must be a table"),
    ({"min_cosin": 0.9}, "unknown threshold(s) min_cosin"),
    ({"fp16_vs_fp32": {"maxabs": 1}}, "unknown threshold(s) maxabs"),
    ({"max_abs": "tiny"}, "threshold max_abs must be a number or off"),
    ({"rtol": "off"}, "threshold rtol cannot be off"),
    ({"same_precision": {"atol": "none"}}, "threshold atol cannot be off"),
])
def test_validate_file_thresholds_errors(table, needle):
    with pytest.raises(UsageError) as err:
        validate_file_thresholds(table, "run.toml")
    text = _one_line(err)
    assert text.startswith("run.toml: ") and needle in text


def test_boolean_threshold_refused():
    with pytest.raises(UsageError, match="must be a number"):
        validate_file_thresholds({"min_top1": True}, "run.toml")
