"""Streamed parity metrics against compute_metrics on the whole arrays: exact counts and
extremes, correctly rounded sums, percentiles and tie tolerances within the sketch's bound,
merges in any order, states through JSON, and a state size that does not grow."""
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.stats.counts import paired_drop_from_counts, paired_drop_interval
from amptool.stats.exactsum import ExactSum
from amptool.stats.metrics import compute_metrics
from amptool.stats.sketch import GRID, LogHistogram, higher_rank
from amptool.stats.stream import OutputStats

EXACT = ("max_abs", "max_abs_scaled", "ref_absmax", "max_rel", "outside_frac", "nonfinite",
         "top1_agree", "counted", "ref_acc", "cand_acc", "acc_drop", "acc_drop_ci")
SUMS = ("mean_abs", "rmse", "rel_l2")
TIES = ("top1_agree_clear", "near_tie_flips", "top1_agree_clear_ci", "acc_drop_clear",
        "acc_drop_clear_ci")
TINY = 2.0 ** GRID.min_exp


def same(a, b) -> bool:
    """Equal to the bit, NaN equal to NaN, lists element by element."""
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)


def close(a, b, rel=1e-12) -> bool:
    if math.isnan(a) or math.isinf(a):
        return same(a, b)
    return abs(a - b) <= rel * abs(b) + 1e-300


def check_percentile(got: float, exact: float, scale: float = 1.0) -> None:
    """The sketch's bound: exact <= got <= exact * (1 + rel_bound), 2^-100 below the grid."""
    if math.isnan(exact) or math.isinf(exact) or exact == 0.0:
        assert same(got, exact), (got, exact)
        return
    assert got >= exact, f"percentile {got!r} below the exact {exact!r}"
    limit = max(exact * (1 + GRID.rel_bound), TINY / scale)
    assert got <= limit * (1 + 1e-15), f"percentile {got!r} past the bound of {exact!r}"


def check_tie_tol(got: float, exact: float) -> None:
    """Twice a median's lower bound: exact / (1 + rel_bound) <= got <= exact."""
    assert got <= exact * (1 + 1e-15), (got, exact)
    assert got >= min(exact / (1 + GRID.rel_bound), exact - 2 * TINY) * (1 - 1e-15), (got, exact)


def check_against(acc: OutputStats, exact: dict) -> None:
    got = acc.result()
    assert list(got) == list(exact)
    for key in EXACT:
        if key in exact:
            assert same(got[key], exact[key]), (key, got[key], exact[key])
    for key in SUMS:
        assert close(got[key], exact[key]), (key, got[key], exact[key])
    assert same(got["cosine"], exact["cosine"]) or abs(got["cosine"] - exact["cosine"]) < 1e-12
    scale = max(1.0, exact["ref_absmax"]) if exact["ref_absmax"] == exact["ref_absmax"] else 1.0
    check_percentile(got["p999_abs_scaled"], exact["p999_abs_scaled"], scale)
    if "tie_tol" not in exact:
        return
    check_tie_tol(got["tie_tol"], exact["tie_tol"])
    if acc.tie_ambiguity() == 0:
        for key in TIES:
            if key in exact:
                assert same(got[key], exact[key]), (key, got[key], exact[key])
    else:
        assert 0 <= exact["near_tie_flips"] - got["near_tie_flips"] <= acc.tie_ambiguity()


def stream(ref, cand, labels=None, splits=None, **kw) -> OutputStats:
    acc = OutputStats(**kw)
    bounds = [0, *sorted(splits or []), len(ref)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        acc.update(ref[lo:hi], cand[lo:hi], None if labels is None else labels[lo:hi])
    return acc


def split_points(rng, n: int, kind: str) -> list:
    if kind == "ones":
        return list(range(1, n))
    if kind == "random":
        return sorted(rng.choice(np.arange(1, n), size=min(n - 1, 7), replace=False).tolist())
    return []


def logits(rng, n=600, k=10, noise=0.05):
    ref = (rng.standard_normal((n, k)) * 3).astype(np.float32)
    cand = (ref + rng.standard_normal((n, k)) * noise).astype(np.float16)
    return ref, cand, rng.integers(0, k, n)


# ---------------------------------------------------------------- against compute_metrics

@pytest.mark.parametrize("kind", ["one", "random", "ones"])
def test_random_logits_with_labels(kind):
    rng = np.random.default_rng(1)
    ref, cand, y = logits(rng, n=300 if kind == "ones" else 1500)
    acc = stream(ref, cand, y, split_points(rng, len(ref), kind))
    exact = compute_metrics(ref, cand, y)
    assert exact["near_tie_flips"] > 0 and exact["top1_agree"] < 1
    check_against(acc, exact)


def test_nonfinite_candidate():
    rng = np.random.default_rng(2)
    ref, cand, y = logits(rng, n=800)
    cand = cand.astype(np.float32)
    cand.flat[rng.choice(cand.size, 40, replace=False)] = [np.nan, np.inf, -np.inf, 7] * 10
    exact = compute_metrics(ref, cand, y)
    assert exact["nonfinite"] == 30 and math.isnan(exact["cosine"])
    check_against(stream(ref, cand, y, split_points(rng, 800, "random")), exact)


def test_nonfinite_past_the_percentile():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((200, 5))
    cand = ref + 1e-3
    cand.flat[:5] = np.inf  # 0.5 % of the elements: the 99.9th percentile is Inf
    exact = compute_metrics(ref, cand, logits=False)
    assert exact["p999_abs_scaled"] == math.inf
    check_against(stream(ref, cand, splits=[3, 50], logits=False), exact)


@pytest.mark.parametrize("cand_zero", [True, False])
def test_all_zero_reference(cand_zero):
    ref = np.zeros((64, 4), np.float32)
    cand = ref.copy() if cand_zero else np.random.default_rng(4).standard_normal((64, 4)) * 1e-3
    exact = compute_metrics(ref, cand, np.zeros(64, int))
    check_against(stream(ref, cand, np.zeros(64, int), [1, 2, 30]), exact)
    assert exact["cosine"] == (1.0 if cand_zero else 0.0)


def test_exact_ties_and_identical_rows():
    """Tied reference logits and rows the candidate copies: tie_tol is exactly 0."""
    rng = np.random.default_rng(5)
    ref = np.round(rng.standard_normal((400, 6)), 1).astype(np.float32)
    ref[:, 3] = ref.max(axis=1)  # every row's top class tied (argmax takes the first)
    cand = ref.copy()
    pick = rng.choice(400, 60, replace=False)
    cand[pick, 3] += 1e-3  # breaks the tie the other way: a flip of gap 0
    y = rng.integers(0, 6, 400)
    exact = compute_metrics(ref, cand, y)
    assert exact["tie_tol"] == 0.0 and exact["near_tie_flips"] > 0
    acc = stream(ref, cand, y, splits=split_points(rng, 400, "random"))
    check_against(acc, exact)
    assert acc.tie_ambiguity() == 0


def test_many_flips_and_a_label_set_per_kind():
    rng = np.random.default_rng(6)
    ref, cand, y = logits(rng, n=1000, k=4, noise=3.0)
    y[::3] = ref[::3].argmax(axis=1)
    y[1::3] = cand[1::3].astype(np.float64).argmax(axis=1)
    exact = compute_metrics(ref, cand, y)
    assert exact["top1_agree"] < 0.8
    check_against(stream(ref, cand, y, split_points(rng, 1000, "random")), exact)


def test_labels_missing_in_one_batch_drop_accuracy():
    rng = np.random.default_rng(7)
    ref, cand, y = logits(rng, n=100)
    acc = OutputStats().update(ref[:50], cand[:50], y[:50]).update(ref[50:], cand[50:])
    exact = compute_metrics(ref, cand)
    assert "ref_acc" not in acc.result()
    check_against(acc, exact)


@pytest.mark.parametrize("shape", [(300,), (40, 3, 5), (12, 2, 4, 3), (50, 1), (20, 0)])
def test_outputs_of_other_shapes(shape):
    rng = np.random.default_rng(8)
    ref = rng.standard_normal(shape) * 4
    cand = (ref + rng.standard_normal(shape) * 1e-2).astype(np.float16)
    exact = compute_metrics(ref, cand)
    for kind in ("one", "random", "ones"):
        check_against(stream(ref, cand, splits=split_points(rng, shape[0], kind)), exact)


def test_nan_in_the_reference_propagates_as_numpy_does():
    rng = np.random.default_rng(9)
    ref, cand, y = logits(rng, n=100)
    ref[7, 2] = np.nan
    with np.errstate(invalid="ignore"):
        exact = compute_metrics(ref, cand, y)
        acc = stream(ref, cand, y, [3, 8, 60])
    check_against(acc, exact)


def test_not_logits_flag_and_tolerances():
    rng = np.random.default_rng(10)
    ref, cand, _ = logits(rng, n=200)
    exact = compute_metrics(ref, cand, atol=0.02, rtol=0.0, logits=False)
    check_against(stream(ref, cand, splits=[10], atol=0.02, rtol=0.0, logits=False), exact)


def test_shape_errors():
    acc = OutputStats().update(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(UsageError, match="shapes differ"):
        acc.update(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(UsageError, match="does not follow"):
        acc.update(np.zeros((2, 4)), np.zeros((2, 4)))
    with pytest.raises(UsageError, match="scalar"):
        OutputStats().update(np.float32(1), np.float32(1))
    with pytest.raises(UsageError, match="same atol"):
        acc.merge(OutputStats(atol=0.5))


# ---------------------------------------------------------------- near-tie tolerance

def test_a_flip_inside_the_tolerance_bin_is_counted_ambiguous():
    """The exact tol is known here; a flip just under it may fall either side of the
    sketch's lower bound: tie_ambiguity says so and the count errs low."""
    ref = np.array([[0.0, 10.0, -90.0]] * 101)
    cand = ref.copy()
    cand[:100, 1] += 0.3  # agreeing rows' error 0.3: exact tol = 0.6
    exact_tol = compute_metrics(ref, cand)["tie_tol"]
    ref[100] = [0.0, exact_tol * 0.999, -90.0]  # flips on a gap just inside tol
    cand[100] = [exact_tol, exact_tol * 0.999, -90.0]
    exact = compute_metrics(ref, cand)
    assert exact["near_tie_flips"] == 1
    acc = stream(ref, cand, splits=[50])
    assert acc.tie_ambiguity() == 1
    check_against(acc, exact)
    assert acc.result()["near_tie_flips"] == 0


@pytest.mark.parametrize("ties", [5, 40])
def test_flips_past_the_cap(ties):
    """Below the cap of kept flips, ties are exact; past it the smallest gaps stay exact."""
    rng = np.random.default_rng(11)
    n = 400
    ref = rng.standard_normal((n, 3)) + np.array([0.0, 0.0, -200.0])
    ref[:, 1] = ref[:, 0] + 5.0
    flips = rng.choice(n, 60, replace=False)
    gaps = np.r_[rng.uniform(0, 0.005, ties), rng.uniform(0.05, 1.0, 60 - ties)]
    ref[flips, 1] = ref[flips, 0] + gaps
    cand = ref + rng.uniform(-1e-2, 1e-2, (n, 3))
    cand[flips, 1] = ref[flips, 1]
    cand[flips, 0] = ref[flips, 1] + 1e-2
    y = rng.integers(0, 3, n)
    exact = compute_metrics(ref, cand, y)
    assert exact["near_tie_flips"] == ties
    acc = stream(ref, cand, y, split_points(rng, n, "random"), cap=16)
    assert acc.top1.flips.overflowed
    check_against(acc, exact)
    if ties < 16:
        assert acc.tie_ambiguity() == 0


# ---------------------------------------------------------------- merge and state

def shard_states(rng, ref, cand, y, shards: int, cap=4096) -> list:
    cuts = sorted(rng.choice(np.arange(1, len(ref)), shards - 1, replace=False).tolist())
    bounds = [0, *cuts, len(ref)]
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        inner = split_points(rng, hi - lo, "random") if hi - lo > 1 else []
        parts.append(stream(ref[lo:hi], cand[lo:hi], y[lo:hi], inner, cap=cap))
    return parts


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key], equal_nan=a[key].dtype.kind == "f"), key


@pytest.mark.parametrize("cap", [4096, 8])
def test_merge_in_any_order_gives_the_same_bits(cap):
    rng = np.random.default_rng(12)
    ref, cand, y = logits(rng, n=900, noise=0.5)
    cand[3, 2] = np.nan
    whole = stream(ref, cand, y, [100, 450], cap=cap)
    for trial in range(4):
        parts = shard_states(rng, ref, cand, y, shards=5, cap=cap)
        rng.shuffle(parts)
        while len(parts) > 1:  # a random merge tree
            i = int(rng.integers(0, len(parts) - 1))
            parts[i:i + 2] = [parts[i].merge(parts[i + 1])]
        assert_same_state(parts[0].to_state(), whole.to_state())
        assert same(list(parts[0].result().values()), list(whole.result().values()))
    check_against(whole, compute_metrics(ref, cand, y))


def test_state_round_trips_through_arrays_and_json():
    rng = np.random.default_rng(13)
    ref, cand, y = logits(rng, n=300, noise=0.5)
    cand[0, 0] = np.inf
    acc = stream(ref, cand, y, [17, 200], cap=8)
    state = acc.to_state()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    text = json.dumps({k: v.tolist() for k, v in state.items()})
    for back in (OutputStats.from_state(state), OutputStats.from_state(json.loads(text))):
        assert_same_state(back.to_state(), state)
        assert same(list(back.result().values()), list(acc.result().values()))
        back.update(ref[:5], cand[:5], y[:5])  # a restored accumulator goes on streaming
    fresh = OutputStats.from_state(OutputStats(logits=False).to_state())
    assert fresh.shape is None and fresh.config.logits is False


def state_bytes(acc: OutputStats) -> int:
    return sum(v.nbytes for v in acc.to_state().values())


def test_state_size_does_not_grow_with_samples():
    rng = np.random.default_rng(14)
    sizes = []
    for n in (1_000, 100_000):
        ref, cand, y = logits(rng, n=n, noise=0.3)
        acc = OutputStats()
        for lo in range(0, n, 5_000):
            acc.update(ref[lo:lo + 5_000], cand[lo:lo + 5_000], y[lo:lo + 5_000])
        sizes.append(state_bytes(acc))
    assert sizes[0] == sizes[1] < 400_000


# ---------------------------------------------------------------- the parts

def test_exact_sum_is_exact_and_order_free():
    rng = np.random.default_rng(15)
    x = rng.standard_normal(5000) * 10.0 ** rng.integers(-300, 300, 5000)
    x = np.r_[x, 1e300, -1e300, 5e-324, 1.0, -1.0]
    rng.shuffle(x)
    whole = ExactSum()
    whole.add(x)
    assert Fraction(whole.fixed, 2 ** 1126) == sum(Fraction(float(v)) for v in x)
    assert whole.value() == math.fsum(x)
    parts = [ExactSum() for _ in range(7)]
    for i, chunk in enumerate(np.array_split(x[::-1], 7)):
        parts[i].add(chunk)
    merged = parts[3]
    for p in parts[:3] + parts[4:]:
        merged.merge(p)
    assert merged.fixed == whole.fixed and merged.value(9) == whole.value(9)


@pytest.mark.parametrize("extra, expected", [([np.inf], math.inf), ([-np.inf], -math.inf),
                                             ([np.inf, -np.inf], math.nan), ([np.nan], math.nan),
                                             ([1.5e308, 1.5e308], math.inf)])
def test_exact_sum_special_values(extra, expected):
    s = ExactSum()
    s.add(np.r_[1.0, 2.0, extra])
    assert same(s.value(), expected)
    assert same(ExactSum.from_state(s.to_state()).value(), expected)


def test_higher_rank_is_numpys():
    for n in [*range(1, 2500), 10_001, 123_457]:
        assert higher_rank(n, 0.999) == np.quantile(np.arange(n), 0.999, method="higher")


def test_every_value_lies_in_its_bin():
    """Edges, their neighbours one ulp away and random values of the whole range: binning
    compares with the edges themselves, so a value never falls outside its bin."""
    rng = np.random.default_rng(19)
    edges = np.concatenate([np.ldexp(GRID.edges[:-1], k)
                            for k in range(GRID.min_exp, GRID.max_exp)])
    x = np.r_[edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf),
              rng.random(20_000) * 10.0 ** rng.integers(-35, 40, 20_000), 0.0, 5e-324, 1e308]
    bins = GRID.index(x)
    lower, upper = GRID.table
    assert np.all((lower[bins] <= x) & (x <= upper[bins]))
    within = upper[bins] <= np.maximum(lower[bins] * (1 + GRID.rel_bound), TINY)
    assert np.all(within | (bins >= GRID.size - 2))
    with pytest.raises(ValueError, match="bins an octave"):
        type(GRID)(per_octave=4096)


def test_sketch_bound_on_heavy_tails():
    """Lognormal values over 20 decades, plus zeros, tiny and huge ones: every quantile
    the sketch reads is within its documented bound of np.quantile's."""
    rng = np.random.default_rng(16)
    x = np.exp(rng.normal(0.0, 20 * math.log(10) / 6, 100_000)) * 1e-3
    x = np.r_[x, np.zeros(50), 1e-35, 1e-31, 1e39]
    hist = LogHistogram()
    for chunk in np.array_split(x, 9):
        hist.add(chunk)
    for q in [0.0, 1e-4, 0.01, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1.0]:
        exact = float(np.quantile(x, q, method="higher"))
        lower, upper = hist.quantile_bounds(q)
        assert lower <= exact <= upper
        if TINY <= exact < 2.0 ** GRID.max_exp:
            check_percentile(upper, exact)
            assert lower * (1 + GRID.rel_bound) >= exact
    lo, hi = hist.median_bounds()
    assert lo <= float(np.median(x)) <= hi


def test_the_percentile_check_catches_a_sketch_past_its_bound(monkeypatch):
    """Planted bugs: a value past the bound, one below the exact value, and a sketch that
    reads the lower edge fail the checks the tests above rely on."""
    with pytest.raises(AssertionError, match="past the bound"):
        check_percentile(0.01 * (1 + 2 * GRID.rel_bound), 0.01)
    with pytest.raises(AssertionError, match="below the exact"):
        check_percentile(0.01 * (1 - 1e-9), 0.01)
    rng = np.random.default_rng(17)
    ref, cand, _ = logits(rng, n=500)
    exact = compute_metrics(ref, cand, logits=False)
    check_against(stream(ref, cand, logits=False), exact)
    flipped = LogHistogram.quantile_bounds
    monkeypatch.setattr(LogHistogram, "quantile_bounds", lambda self, q: flipped(self, q)[::-1])
    with pytest.raises(AssertionError, match="below the exact"):
        check_against(stream(ref, cand, logits=False), exact)


def test_paired_drop_from_counts_is_paired_drop_interval():
    rng = np.random.default_rng(18)
    for _ in range(50):
        r, c = rng.random(int(rng.integers(1, 60))) < 0.7, rng.random(1) < 0.5
        c = rng.random(len(r)) < rng.random()
        table = [int((r & c).sum()), int((r & ~c).sum()), int((~r & c).sum()),
                 int((~r & ~c).sum())]
        assert paired_drop_from_counts(*table) == paired_drop_interval(r, c)
    assert paired_drop_from_counts(0, 0, 0, 0) == paired_drop_interval([], [])
