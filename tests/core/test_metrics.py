"""Parity metrics on known arrays, pass/fail rows, threshold layering and flag parsing."""
import math

import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.stats.limits import (FP16_VS_FP32, SAME_PRECISION, Thresholds, check_output_tables,
                                  flag_overrides, parse_limit, resolve_thresholds,
                                  validate_file_thresholds)
from amptool.stats.metrics import check_metrics, compute_metrics, degenerate_reference, passed


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

GOOD = {"nonfinite": 0, "cosine": 0.99999, "max_abs": 1e-5, "max_abs_scaled": 1e-6,
        "max_rel": 1e-4, "outside_frac": 0.0, "top1_agree": 1.0, "top1_agree_clear": 1.0,
        "acc_drop": 0.0, "acc_drop_clear": 0.0}
STRICT = Thresholds(min_cosine=0.9999, min_top1=1.0, max_acc_drop=0.001, max_abs=1e-4,
                    max_abs_scaled=1e-5, max_rel=1e-3, max_outside=0.01)


def test_all_rows_pass():
    rows = check_metrics(GOOD, STRICT)
    assert [r["metric"] for r in rows] == ["nonfinite", "cosine", "max_abs", "max_abs_scaled",
                                           "max_rel", "outside_frac", "top1_agree_clear",
                                           "acc_drop_clear"]
    assert all(r["passed"] for r in rows) and passed(rows)
    assert {r["metric"]: r["limit"] for r in rows}["cosine"] == ">= 0.9999"


@pytest.mark.parametrize("metric,bad", [
    ("nonfinite", 3), ("cosine", 0.99), ("cosine", float("nan")), ("max_abs", 1e-3),
    ("max_rel", 0.5), ("outside_frac", 0.2), ("top1_agree_clear", 0.98), ("acc_drop_clear", 0.01),
    ("max_abs", float("inf")), ("max_abs_scaled", 1e-4), ("max_abs_scaled", float("nan")),
])
def test_planted_error_fails_its_row(metric, bad):
    rows = check_metrics({**GOOD, metric: bad}, STRICT)
    failed = [r["metric"] for r in rows if not r["passed"]]
    assert failed == [metric]
    assert not passed(rows)


def test_limit_boundaries():
    th = Thresholds(max_acc_drop=0.005, min_top1=0.99)
    rows = check_metrics({**GOOD, "acc_drop_clear": 0.7 - 0.695, "top1_agree_clear": 0.99}, th)
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
    assert failed == {"cosine", "top1_agree_clear", "acc_drop_clear"}
    assert not passed(check_metrics(compute_metrics(ref, close, labels), SAME_PRECISION))


# ---------------------------------------------------------------- scaled error

def _large_logits(seed: int = 0) -> np.ndarray:
    """Logits reaching ~2,400, like a seeded zoo network's."""
    return (np.random.default_rng(seed).standard_normal((64, 10)) * 800.0).astype(np.float32)


def test_scaled_error_passes_fp32_noise_on_large_logits():
    ref = _large_logits()
    noise = np.random.default_rng(1).uniform(-1, 1, ref.shape)
    cand = (ref.astype(np.float64) * (1 + 7e-6 * noise)).astype(np.float32)
    m = compute_metrics(ref, cand, ref.argmax(axis=1))
    assert m["ref_absmax"] > 2000 and m["max_abs"] > 1e-3   # the absolute error is large ...
    assert m["max_abs_scaled"] == pytest.approx(m["max_abs"] / m["ref_absmax"])
    assert m["max_abs_scaled"] < 1e-5                       # ... relative to the output
    rows = check_metrics(m, SAME_PRECISION)
    assert passed(rows) and "max_abs_scaled" in {r["metric"] for r in rows}
    assert "max_abs" not in {r["metric"] for r in rows}


def test_scaled_error_catches_fp16_rounding_of_an_fp32_output():
    ref = _large_logits()
    rounded = ref.astype(np.float16).astype(np.float32)   # a silent fp16 cast of the output
    m = compute_metrics(ref, rounded, ref.argmax(axis=1))
    assert 1e-4 < m["max_abs_scaled"] < 5e-4
    failed = [r["metric"] for r in check_metrics(m, SAME_PRECISION) if not r["passed"]]
    assert failed == ["max_abs_scaled"]
    small = np.random.default_rng(2).uniform(-1, 1, (8, 10))
    m_small = compute_metrics(small, small + 5e-4)
    assert m_small["max_abs_scaled"] == pytest.approx(m_small["max_abs"])  # absolute within ±1
    assert not passed(check_metrics(m_small, SAME_PRECISION))


# ---------------------------------------------------------------- near-tie flips

def _tied_pair():
    """64 samples with clear margins, except sample 5 whose top two differ by 1e-4."""
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((64, 10))
    ref[np.arange(64), ref.argmax(axis=1)] += 1.0           # margins of at least 1
    top = ref[5].argmax()
    second = (top + 1) % 10
    ref[5, second] = ref[5, top] - 1e-4
    cand = ref + rng.uniform(-1e-3, 1e-3, ref.shape)        # fp16-like noise
    cand[5, second] = cand[5, top] + 2e-4                   # the coin flip
    return ref, cand


def test_a_near_tie_flip_is_counted_apart_and_passes():
    ref, cand = _tied_pair()
    m = compute_metrics(ref, cand)
    assert m["top1_agree"] == pytest.approx(63 / 64) and m["near_tie_flips"] == 1
    assert m["top1_agree_clear"] == 1.0 and 1e-3 < m["tie_tol"] < 2e-3
    rows = check_metrics(m, FP16_VS_FP32)
    assert passed(rows)
    assert {r["metric"]: r["passed"] for r in rows}["top1_agree_clear"] is True


def test_a_near_tie_flip_that_costs_a_label_does_not_fail_accuracy():
    ref, cand = _tied_pair()
    labels = ref.argmax(axis=1)                               # the reference is always right
    m = compute_metrics(ref, cand, labels)
    assert m["acc_drop"] == pytest.approx(1 / 64)            # raw: the coin flip cost a label
    assert m["acc_drop_clear"] == 0.0
    assert passed(check_metrics(m, FP16_VS_FP32))
    ref2, cand2 = _tied_pair()
    cand2[9] = ref2[9]
    cand2[9, (ref2[9].argmax() + 1) % 10] = ref2[9].max() + 1.0   # planted: a clear loss
    m2 = compute_metrics(ref2, cand2, labels)
    assert m2["acc_drop_clear"] == pytest.approx(1 / 64)
    assert "acc_drop_clear" in [r["metric"] for r in check_metrics(m2, FP16_VS_FP32)
                                if r["passed"] is False]


def test_a_clear_margin_flip_still_fails():
    ref, cand = _tied_pair()
    top = ref[9].argmax()
    wrong = (top + 3) % 10
    ref[9, wrong] = ref[9, top] - 0.3                         # a clear margin of 0.3 ...
    cand[9] = ref[9]
    cand[9, wrong] = ref[9, top] + 0.01                      # ... flipped: a planted fault
    m = compute_metrics(ref, cand)
    assert m["top1_agree"] == pytest.approx(62 / 64) and m["near_tie_flips"] == 1
    assert m["top1_agree_clear"] == pytest.approx(63 / 64)
    assert m["tie_tol"] < 2e-3                               # the fault does not widen it
    rows = check_metrics(m, FP16_VS_FP32)
    assert [r["metric"] for r in rows if r["passed"] is False] == ["top1_agree_clear"]
    assert m["cosine"] > 0.999                               # cosine alone would miss it


def test_a_broken_candidate_cannot_pass_its_flips_off_as_ties():
    ref, _ = _tied_pair()
    broken = np.random.default_rng(7).standard_normal(ref.shape)   # errors large everywhere
    m = compute_metrics(ref, broken)
    assert m["tie_tol"] > 1.0                                 # its typical error is large ...
    assert m["near_tie_flips"] <= 1                           # ... but margins are not ties
    assert m["top1_agree_clear"] < 0.3
    assert "top1_agree_clear" in [r["metric"] for r in check_metrics(m, FP16_VS_FP32)
                                  if r["passed"] is False]


def test_a_nonfinite_sample_is_never_a_near_tie():
    ref, cand = _tied_pair()
    cand[5, 0] = np.nan
    m = compute_metrics(ref, cand)
    assert m["near_tie_flips"] == 0 and m["top1_agree_clear"] < 1.0


# ---------------------------------------------------------------- n/a limits

def test_top1_and_accuracy_are_na_on_a_non_logits_output():
    ref = np.random.default_rng(4).standard_normal((16, 1))
    m = compute_metrics(ref, ref * 0.5, labels=np.zeros(16, np.int64))
    rows = {r["metric"]: r for r in check_metrics(m, FP16_VS_FP32)}
    for name in ("top1_agree_clear", "acc_drop_clear"):
        assert rows[name]["passed"] is None and rows[name]["value"] is None
        assert "not class logits" in rows[name]["note"]
    assert rows["cosine"]["passed"] is True and passed(rows.values())
    broken = check_metrics(compute_metrics(ref, -ref), FP16_VS_FP32)
    assert not passed(broken)   # an n/a row never turns a failure into a pass


def test_labels_that_do_not_fit_give_no_accuracy():
    boxes = np.random.default_rng(5).standard_normal((8, 4))
    m = compute_metrics(boxes, boxes, labels=np.arange(8) % 10)   # class ids up to 9, 4 columns
    assert "top1_agree" in m and "acc_drop" not in m
    row = {r["metric"]: r for r in check_metrics(m, FP16_VS_FP32)}["acc_drop_clear"]
    assert row["passed"] is None and row["note"] == "no labels that fit this output"
    assert "acc_drop" in compute_metrics(boxes, boxes, labels=np.arange(8) % 4)


# ---------------------------------------------------------------- degenerate reference

def test_degenerate_reference_is_named():
    rng = np.random.default_rng(6)
    assert degenerate_reference(rng.standard_normal((32, 10))) is None
    tiny = rng.standard_normal((32, 10)) * 1e-8              # an untrained zoo net's logits
    assert "near-constant" in degenerate_reference(tiny)
    same = np.tile(rng.standard_normal(10), (32, 1))         # one output for every input
    assert "same output for every input" in degenerate_reference(same)
    assert "NaN/Inf" in degenerate_reference(np.array([[1.0, np.inf], [0.0, 1.0]]))
    assert degenerate_reference(np.zeros((0, 3))) is None


# ---------------------------------------------------------------- resolve_thresholds

def test_defaults_per_pair():
    assert resolve_thresholds("fp32", "fp32") == SAME_PRECISION
    assert resolve_thresholds("fp32", "fp16") == FP16_VS_FP32
    assert resolve_thresholds(None, None) == FP16_VS_FP32
    assert SAME_PRECISION.max_abs is None and FP16_VS_FP32.max_abs is None
    assert SAME_PRECISION.max_abs_scaled == 1e-4 and FP16_VS_FP32.max_abs_scaled is None


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


OUT_TABLE = {"min_cosine": 0.99,
             "outputs": {"1": {"min_cosine": 0.9, "min_top1": "off"},
                         "boxes": {"max_abs": 0.5}}}


def test_per_output_tables_by_index_and_name():
    first = resolve_thresholds("fp32", "fp16", OUT_TABLE, output=(0, "logits"))
    second = resolve_thresholds("fp32", "fp16", OUT_TABLE, output=(1, "aux"))
    boxes = resolve_thresholds("fp32", "fp16", OUT_TABLE, output=(2, "boxes"))
    assert (first.min_cosine, first.min_top1) == (0.99, FP16_VS_FP32.min_top1)
    assert (second.min_cosine, second.min_top1) == (0.9, None)
    assert boxes.max_abs == 0.5 and boxes.min_cosine == 0.99
    flagged = resolve_thresholds("fp32", "fp16", OUT_TABLE, {"min_cosine": 0.5}, output=(1, "aux"))
    assert flagged.min_cosine == 0.5   # flags win over every table
    check_output_tables(OUT_TABLE, ["logits", "aux", "boxes"])


def test_per_output_table_errors():
    with pytest.raises(UsageError) as err:
        check_output_tables(OUT_TABLE, ["logits", "aux"])
    assert "thresholds.outputs.boxes: no output is named or numbered boxes" in _one_line(err)
    assert "0 (logits), 1 (aux)" in str(err.value)
    with pytest.raises(UsageError, match="has two tables"):
        check_output_tables({"outputs": {"0": {}, "logits": {}}}, ["logits"])
    with pytest.raises(UsageError, match="thresholds.outputs must be a table"):
        validate_file_thresholds({"outputs": 3}, "run.toml")
    with pytest.raises(UsageError, match="thresholds.outputs.aux must be a table"):
        validate_file_thresholds({"outputs": {"aux": 0.9}}, "run.toml")
    with pytest.raises(UsageError, match="unknown threshold"):
        validate_file_thresholds({"outputs": {"aux": {"min_cos": 0.9}}}, "run.toml")


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


def test_an_output_that_cannot_be_logits_gets_the_scaled_bound_even_without_a_task():
    """A detector's box or feature output exported from a checkpoint (no task recorded):
    its scaled error is bounded by default, its top-1 rows stay (reported n/a)."""
    from amptool.stats.limits import NOT_LOGITS_MAX_ABS_SCALED

    th = resolve_thresholds("fp32", "fp16", bound_scaled=True)
    assert th.max_abs_scaled == NOT_LOGITS_MAX_ABS_SCALED and th.min_top1 == 0.99
    assert resolve_thresholds("fp32", "fp16").max_abs_scaled is None  # class logits: as before
    assert resolve_thresholds("fp32", "fp32", bound_scaled=True).max_abs_scaled == 1e-4
    off = resolve_thresholds("fp32", "fp16", flags={"max_abs_scaled": None}, bound_scaled=True)
    assert off.max_abs_scaled is None


def test_outputs_that_are_no_logits_are_held_by_their_bulk_and_their_worst_element():
    """fp16 rounding compounded through a deep graph spreads over every element of a big
    output (YOLOv8-n's stride-8 map: 102,912 elements, rms 6 u, worst 55 u of its scale): a
    1e-2 bound on the worst element fails it, the 99.9th percentile (64 u) and a looser
    bound on the worst element (128 u) do not. A spike in one element breaches the second, a
    block of elements shifted by 4 % of the scale the first, though the worst element stays
    under its bound and cosine under 0.999 neither."""
    from amptool.stats.limits import (FP16_UNIT, NOT_LOGITS_MAX_ABS_SCALED,
                                      NOT_LOGITS_MAX_P999_ABS_SCALED)

    th = resolve_thresholds("fp32", "fp16", logits=False)
    assert (th.max_p999_abs_scaled, th.max_abs_scaled) == (64 * FP16_UNIT, 128 * FP16_UNIT)
    assert th.max_p999_abs_scaled == NOT_LOGITS_MAX_P999_ABS_SCALED == 2 ** -5
    assert th.max_abs_scaled == NOT_LOGITS_MAX_ABS_SCALED == 2 ** -4
    assert resolve_thresholds("fp32", "fp32", logits=False).max_p999_abs_scaled is None
    assert resolve_thresholds("fp32", "fp16").max_p999_abs_scaled is None  # class logits
    rng = np.random.default_rng(0)
    ref = (rng.standard_normal((24, 67, 8, 8)) * 4).astype(np.float32)
    scale = float(np.abs(ref).max())
    healthy = ref + (rng.standard_normal(ref.shape) * 8 * FP16_UNIT * scale).astype(np.float32)
    m = compute_metrics(ref, healthy, logits=False)
    assert 1e-2 < m["max_abs_scaled"] < th.max_abs_scaled  # the former bound: a false alarm
    assert m["p999_abs_scaled"] < th.max_p999_abs_scaled and m["cosine"] > th.min_cosine
    assert m["p999_abs_scaled"] == pytest.approx(np.quantile(
        np.abs(healthy.astype(np.float64) - ref), 0.999, method="higher") / scale)
    assert passed(check_metrics(m, th))
    spike = healthy.copy()
    spike[3, 5, 2, 2] += 0.1 * scale
    block = healthy.copy()
    block[:, 7] += 0.04 * scale  # one channel of 67: 1.5 % of the elements
    for cand, breached in ((spike, "max_abs_scaled"), (block, "p999_abs_scaled")):
        rows = check_metrics(compute_metrics(ref, cand, logits=False), th)
        assert [r["metric"] for r in rows if r["passed"] is False] == [breached]


# ---------------------------------------------------------------- what a sample count resolves

def test_wilson_interval_matches_its_textbook_values():
    from amptool.stats.counts import wilson

    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def test_paired_drop_interval_holds_the_drop_and_narrows_with_samples():
    from amptool.stats.counts import paired_drop_interval

    rng = np.random.RandomState(0)
    widths = []
    for n in (128, 2048):
        ref = rng.rand(n) < 0.9
        cand = ref.copy()
        cand[np.flatnonzero(ref)[: n // 64]] = False     # the candidate loses 1/64 of them
        lo, hi = paired_drop_interval(ref, cand)
        drop = ref.mean() - cand.mean()
        assert lo < drop < hi and lo > -0.05 and hi < 0.06
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 3                      # ~1/sqrt(n): 16x the samples
    lo, hi = paired_drop_interval(ref, ref)               # identical outcomes: about 0
    assert lo < 0 < hi and hi - lo < 0.01


def test_a_budget_below_one_sample_is_named_with_its_fix():
    """The issue's case: one lost label in 128 (0.78 %) against a 0.5 % budget."""
    from amptool.stats.counts import resolution_finding

    ref = np.eye(10)[np.arange(128) % 10] * 5.0
    cand = ref.copy()
    cand[0] = np.roll(cand[0], 1)                         # a clear flip on a labelled sample
    metrics = compute_metrics(ref, cand, np.arange(128) % 10)
    assert metrics["counted"] == 128 and metrics["acc_drop_clear"] == pytest.approx(1 / 128)
    lo, hi = metrics["acc_drop_clear_ci"]
    assert lo < 0 < 0.005 < 1 / 128 < hi                  # 128 samples cannot tell 0.5 % apart
    rows = {r["metric"]: r for r in check_metrics(metrics, FP16_VS_FP32)}
    acc = rows["acc_drop_clear"]
    assert acc["passed"] is False and acc["ci"] == [lo, hi] and acc["resolution"] == 1 / 128
    found = resolution_finding("logits", acc)
    assert "max_acc_drop 0.005 (0.50%) is below one sample in 128 (0.78%)" in found["message"]
    assert found["fix"] == "use --samples >= 200 or raise --max-acc-drop to 0.0079 or more"
    top1 = resolution_finding("logits", rows["top1_agree_clear"])   # 1 % of 128 is 1.28 samples
    assert top1 is None and rows["top1_agree_clear"]["ci"][1] == pytest.approx(1.0, abs=0.01)
    for budget in (0.0, 1 / 128, 0.01):                   # exact, one sample, more: resolved
        th = Thresholds(max_acc_drop=budget)
        acc = {r["metric"]: r for r in check_metrics(metrics, th)}["acc_drop_clear"]
        assert resolution_finding("logits", acc) is None, budget
    tight = Thresholds(min_top1=0.995)
    flips = {r["metric"]: r for r in check_metrics(metrics, tight)}["top1_agree_clear"]
    assert "use --samples >= 200 or lower --min-top1 to 0.9921 or less" == \
        resolution_finding("logits", flips)["fix"]


def test_a_task_metric_is_a_count_only_when_both_values_are():
    from amptool.parity.task import rate_counts

    assert rate_counts(0.75, 0.5, 4) == (3, 2)
    assert rate_counts(-0.3, -0.31, 100) is None          # a negative error: no rate
    assert rate_counts(0.7512, 0.74, 100) is None          # not a count over 100
    assert rate_counts(1.0, 1.0, 100) is None              # could be anything
