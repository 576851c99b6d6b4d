"""``--loss`` and ``--metric``: built-in losses against numpy, regression training, loss
factories recorded and vetted, and every mistake one line with exit 2 and nothing written."""
import json

import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.network.losses import LossSpec, build_loss, resolve_loss
from amptool.runtime.device import set_device

from .test_cli import assert_one_line_error, invoke

REG_MODEL = '''
import mindspore.nn as nn


class Reg(nn.Cell):
    """Eight features to three float targets."""

    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell([nn.Dense(8, 32), nn.ReLU(), nn.Dense(32, 3)])

    def construct(self, x):
        return self.body(x)


def build():
    return Reg()


build.input_signature = "x:-1x8:float32"
'''

LOSSES = '''
import mindspore.nn as nn


def two_targets():
    def loss(out, y_a, y_b):
        return ((out[:, :2] - y_a) ** 2).mean() + nn.L1Loss()(out[:, 2:], y_b)
    return loss


two_targets.targets = ["y_a", "y_b"]


def one_argument():
    return lambda out: out.mean()


def vector():
    return lambda out, y: (out - y) ** 2
'''

METRICS = '''
import numpy as np


def neg_mae(outputs, targets):
    return -float(np.abs(outputs[0] - targets).mean())


def broken(outputs, targets):
    raise KeyError("no such column")
'''




@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """A folder with the regression model, loss and metric files and a regression npz."""
    root = tmp_path_factory.mktemp("task")
    (root / "reg.py").write_text(REG_MODEL)
    (root / "losses.py").write_text(LOSSES)
    (root / "metrics.py").write_text(METRICS)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((320, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3)).astype(np.float32) / np.sqrt(8)
    y = (np.tanh(x @ w) * 3 + 1).astype(np.float32)
    np.savez(root / "reg.npz", x=x, y=y)
    np.savez(root / "flat.npz", x=x, y=y[:, 0])
    np.savez(root / "two.npz", x=x, y_a=y[:, :2], y_b=y[:, 2:])
    np.savez(root / "numbered.npz", x=x, y0=y[:, :2], y1=y[:, 2:])
    return root


# --- built-in losses against numpy, in fp32 ------------------------------------------

def _value(kind, out, *ys, ignore=-100, graph=False):
    import mindspore as ms

    set_device("CPU", graph=graph)
    cell = build_loss(LossSpec(kind, kind, ignore_index=ignore))
    return float(cell((ms.Tensor(out),), tuple(ms.Tensor(y) for y in ys)).asnumpy())


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


RNG = np.random.default_rng(7)
OUT = (RNG.standard_normal((4, 3)) * 3).astype(np.float32)
Y = (RNG.standard_normal((4, 3)) * 3).astype(np.float32)


def _close(got, want):  # fp32 arithmetic on values of order 10: relative to the value's scale
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (got, want)


def test_mse_l1_and_smooth_l1_match_numpy():
    diff = OUT.astype(np.float64) - Y
    _close(_value("mse", OUT, Y), (diff ** 2).mean())
    _close(_value("l1", OUT, Y), np.abs(diff).mean())
    huber = np.where(np.abs(diff) < 1, 0.5 * diff ** 2, np.abs(diff) - 0.5)
    _close(_value("smooth-l1", OUT, Y), huber.mean())


def test_bce_matches_numpy_on_multi_label_targets():
    labels = (RNG.random((4, 3)) < 0.5).astype(np.float32)
    z = OUT.astype(np.float64)
    want = (np.maximum(z, 0) - z * labels + np.log1p(np.exp(-np.abs(z)))).mean()
    _close(_value("bce", OUT, labels), want)


@pytest.mark.parametrize("ignore", [-100, 0])
def test_token_cross_entropy_leaves_ignored_tokens_out(ignore):
    logits = (RNG.standard_normal((2, 5, 7)) * 2).astype(np.float32)
    tokens = RNG.integers(1, 7, (2, 5)).astype(np.int32)
    tokens[0, 1] = tokens[1, 3] = ignore
    logp = _log_softmax(logits.astype(np.float64))
    keep = tokens != ignore
    picked = np.take_along_axis(logp, np.where(keep, tokens, 0)[..., None], -1)[..., 0]
    _close(_value("token-cross-entropy", logits, tokens, ignore=ignore), -picked[keep].mean())


@pytest.mark.parametrize("graph", [False, True])
def test_cross_entropy_matches_numpy(graph):
    """Class logits (N, C), logits past exp's fp32 range included (a softmax that does not
    subtract the maximum first overflows there), and (N, C, L) logits with (N, L) labels,
    compiled or not."""
    labels = np.array([0, 2, 1, 2], np.int32)
    for out in (OUT, OUT * 100, (OUT * 100).astype(np.float16)):
        logp = _log_softmax(out.astype(np.float64))
        _close(_value("cross-entropy", out, labels, graph=graph),
               -logp[np.arange(4), labels].mean())
    wide = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    places = RNG.integers(0, 3, (4, 5)).astype(np.int32)
    logp = _log_softmax(np.moveaxis(wide, 1, -1).astype(np.float64))
    _close(_value("cross-entropy", wide, places, graph=graph),
           -np.take_along_axis(logp, places[..., None], -1).mean())


def test_fp16_outputs_are_cast_to_fp32_before_the_loss():
    """An fp16 output of 300 squares past nothing in fp32 (300**2 = 9e4 > 65504 in fp16)."""
    big = np.full((2, 3), 300.0, np.float16)
    assert _value("mse", big, np.zeros((2, 3), np.float32)) == pytest.approx(9e4, rel=1e-6)


def test_loss_names():
    assert resolve_loss(None) is None
    assert resolve_loss("token-cross-entropy:0").ignore_index == 0
    assert resolve_loss("MSE").kind == "mse"
    with pytest.raises(UsageError, match="unknown loss 'hinge'"):
        resolve_loss("hinge")
    with pytest.raises(UsageError, match="ignore index"):
        resolve_loss("token-cross-entropy:x")


# --- training a regression network ------------------------------------------------------

@pytest.fixture(scope="module")
def reg_run(task, tmp_path_factory):
    """A regression run with --loss mse, trained once for the module."""
    out = tmp_path_factory.mktemp("reg") / "run"
    code, output = invoke("train", "--model", task / "reg.py:build", "--data",
                          f"npz:{task / 'reg.npz'}", "--loss", "mse", "--epochs", "4",
                          "--lr", "0.01", "--batch-size", "16", "--out", out, "--json")
    assert code == 0, output
    return out, json.loads(output)


@pytest.mark.slow
def test_regression_trains_with_mse_and_its_val_loss_drops(reg_run, task):
    out, summary = reg_run
    assert summary["val_acc"] is None and summary["score"] == "neg_val_loss"
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
              if "val_loss" in line]
    losses = [e["val_loss"] for e in epochs]
    y = np.load(task / "reg.npz")["y"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert losses[-1] < 0.5 * float(y.var(axis=0).mean()), losses  # beats the mean predictor
    assert summary["best_score"] == pytest.approx(-min(losses))
    run = json.loads((out / "run.json").read_text())
    assert run["loss"] == {"name": "mse", "kind": "mse", "targets": ["y"], "classifier": False}
    assert run["model"]["num_classes"] is None and run["config"]["loss"] == "mse"


@pytest.mark.slow
def test_a_loss_factory_from_a_file_is_recorded_kept_and_vetted(task, tmp_path):
    out = tmp_path / "run"
    code, output = invoke("train", "--model", task / "reg.py:build", "--data",
                          f"npz:{task / 'two.npz'}", "--loss", task / "losses.py:two_targets",
                          "--epochs", "1", "--out", out, "--json")
    assert code == 0, output
    run = json.loads((out / "run.json").read_text())
    assert run["loss"]["targets"] == ["y_a", "y_b"] and run["loss"]["kind"] == "factory"
    kept = out / run["loss"]["file"]
    assert kept.read_text() == (task / "losses.py").read_text()
    # resuming takes the loss from run.json: its kept copy runs, once vetted
    code, output = invoke("train", "--resume", "--epochs", "2", "--out", out, "--json")
    assert code == 0, output
    assert json.loads((out / "run.json").read_text())["config"]["loss"].startswith(str(out))
    kept.chmod(0o644)
    kept.write_text(kept.read_text() + "\nprint('planted')\n")
    code, output = invoke("train", "--resume", "--epochs", "3", "--out", out)
    assert_one_line_error(code, output, "loss file", "does not match the recorded sha256")


@pytest.mark.slow
def test_a_metric_picks_best_and_is_reported(task, tmp_path):
    out = tmp_path / "run"
    code, output = invoke("train", "--model", task / "reg.py:build", "--data",
                          f"npz:{task / 'reg.npz'}", "--loss", "smooth-l1", "--metric",
                          task / "metrics.py:neg_mae", "--epochs", "2", "--out", out, "--json")
    assert code == 0, output
    summary = json.loads(output)
    assert summary["score"] == "metric" and summary["val_score"] < 0
    assert summary["best_score"] >= summary["val_score"] and summary["val_loss"] > 0
    assert json.loads((out / "run.json").read_text())["metric"]["file"].startswith("model/")


# --- mistakes: one line, exit 2, nothing written ------------------------------------------

@pytest.mark.parametrize("args, fragments", [
    (("--data", "npz:{task}/reg.npz"), ("no default loss fits", "--loss")),
    (("--data", "npz:{task}/flat.npz", "--loss", "mse"),
     ("loss mse takes targets of the first output's shape", "target y is ['N']")),
    (("--data", "npz:{task}/numbered.npz", "--loss", "l1"),
     ("gives the targets y0, y1", "loss l1 takes one target")),
    (("--data", "npz:{task}/reg.npz", "--loss", "token-cross-entropy"),
     ("token-cross-entropy takes outputs (N, T, V)",)),
    (("--data", "npz:{task}/reg.npz", "--loss", "{task}/losses.py:one_argument"),
     ("takes 1 argument(s)", "1 output(s) and the loss 1 target(s)")),
    (("--data", "npz:{task}/reg.npz", "--loss", "{task}/losses.py:vector"),
     ("not a float scalar",)),
    (("--data", "npz:{task}/reg.npz", "--loss", "{task}/losses.py:two_targets"),
     ("has arrays x, y, the loss takes the targets y_a, y_b",)),
    (("--data", "npz:{task}/reg.npz", "--loss", "mse", "--metric",
      "{task}/metrics.py:broken"), ("metrics.py:broken raised KeyError",)),
    (("--data", "npz:{task}/reg.npz", "--loss", "hinge"), ("unknown loss 'hinge'",)),
    (("--data", "npz:{task}/reg.npz", "--loss", "mse", "--metric", "nofile"),
     ("--metric takes path/file.py:fn",)),
])
def test_task_mistakes_are_one_line_and_write_nothing(task, tmp_path, args, fragments):
    out = tmp_path / "run"
    filled = [str(a).format(task=task) for a in args]
    code, output = invoke("train", "--model", task / "reg.py:build", *filled, "--epochs", "1",
                          "--out", out)
    assert_one_line_error(code, output, *fragments)
    assert not out.exists()


@pytest.mark.slow  # trains the regression network until its scale fits
def test_overflow_skipping_works_with_a_regression_loss(task):
    """A 2**40 scale overflows the fp16 backward pass of an mse step: skipped, weights kept,
    scale halved; once the scale fits the step updates."""
    import mindspore as ms

    from amptool.network.losses import LossSpec, build_loss
    from amptool.network.models import resolve_model
    from amptool.precision.apply import apply_policy
    from amptool.precision.policy import make_policy
    from amptool.train.engine import LossScale, TrainStep, make_optimizer

    set_device("CPU")
    ms.set_seed(0)
    net = resolve_model(f"{task / 'reg.py'}:build").build()
    opt = make_optimizer("adam", net.trainable_params(), 1e-3)
    step = TrainStep(apply_policy(net, make_policy("O2")), build_loss(LossSpec("mse", "mse")),
                     opt, LossScale("dynamic", 2.0 ** 40, 2, 2000), inputs=1)
    data = np.load(task / "reg.npz")
    x, y = ms.Tensor(data["x"][:16]), ms.Tensor(data["y"][:16])
    before = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    loss, finite = step.step(x, y)
    assert not bool(finite.asnumpy()) and step.scale_value() == 2.0 ** 39
    assert np.isfinite(float(loss.asnumpy()))
    assert all(np.array_equal(v, p.asnumpy()) for v, p in
               zip(before.values(), net.get_parameters()))
    tries = 0
    while not bool(step.step(x, y)[1].asnumpy()):
        tries += 1
        assert tries < 40
    assert any(not np.array_equal(before[p.name], p.asnumpy()) for p in net.get_parameters())


# --- parity judges a regression by its errors, not by top-1 ----------------------------------

def test_outputs_that_are_no_class_logits_get_no_top1_and_a_scaled_error_bound():
    from amptool.stats.limits import NOT_LOGITS_MAX_ABS_SCALED, resolve_thresholds

    fp16 = resolve_thresholds("fp32", "fp16", logits=False)
    assert fp16.min_top1 is None and fp16.max_acc_drop is None
    assert fp16.max_abs_scaled == NOT_LOGITS_MAX_ABS_SCALED
    assert resolve_thresholds("fp32", "fp32", logits=False).max_abs_scaled == 1e-4
    flagged = resolve_thresholds("fp32", "fp16", flags={"max_abs_scaled": None}, logits=False)
    assert flagged.max_abs_scaled is None  # a flag still turns it off
    assert resolve_thresholds("fp32", "fp16").min_top1 == 0.99  # classifiers: unchanged


@pytest.mark.slow
def test_amptool_run_on_a_regression_network_passes_parity(task, tmp_path):
    out = tmp_path / "pipe"
    code, output = invoke("run", "--model", task / "reg.py:build", "--data",
                          f"npz:{task / 'reg.npz'}", "--loss", "mse", "--epochs", "2",
                          "--out", out)
    assert code == 0, output
    assert "parity PASSED" in output and "val loss" in output
    report = json.loads((out / "parity.json").read_text())
    fp16 = next(c for c in report["candidates"]
                if c["format"] == "MINDIR" and c["precision"] == "fp16")
    checks = {row["metric"]: row for row in fp16["outputs"][0]["checks"]}
    assert set(checks) == {"nonfinite", "cosine", "max_abs_scaled", "p999_abs_scaled"}, checks
    assert all(row["passed"] for row in checks.values())
    formats = {(c["format"], c["precision"]) for c in report["candidates"]}
    assert ("MINDIR", "fp16") in formats
    manifest = json.loads((out / "export" / "build_fp16.mindir.json").read_text())
    assert manifest["task"]["kind"] == "mse" and manifest["model"]["num_classes"] is None


# --- convert search judges a regression by its errors, not by top-1 --------------------------

@pytest.mark.slow
def test_search_on_a_regression_run_is_held_to_the_scaled_error(reg_run, tmp_path):
    """The run's loss (mse) says its 3 outputs are no class logits: the trials carry no top-1,
    and the limits are parity's for such outputs (max_abs_scaled 2^-4, its 99.9th percentile
    2^-5); a bound below what fp16 leaves keeps every cell in fp32, which is no fp16 policy."""
    from amptool.convert.search import SearchConfig, search_policy
    from amptool.errors import CheckFailed

    out, _ = reg_run
    found = search_policy(SearchConfig(run=str(out), samples=64, out=str(tmp_path / "p.toml"),
                                       range_safety=None))
    result = found.to_dict()
    assert result["classifier"] is False and result["kept"] == []
    assert result["thresholds"]["min_top1"] is None and result["thresholds"]["max_acc_drop"] is None
    assert result["thresholds"]["max_abs_scaled"] == 2 ** -4
    assert result["thresholds"]["max_p999_abs_scaled"] == 2 ** -5
    metrics = result["trials"][0]["metrics"]
    assert "top1_agree" not in metrics and 0 < metrics["max_abs_scaled"] < 1e-2
    strict = SearchConfig(run=str(out), samples=64, out=str(tmp_path / "q.toml"),
                          range_safety=None, threshold_flags={"max_abs_scaled": 1e-6})
    with pytest.raises(CheckFailed, match="had to stay fp32"):
        search_policy(strict)


@pytest.mark.slow
def test_search_holds_its_trials_to_the_users_metric(reg_run, task, tmp_path):
    """With --metric each trial's drop from the fp32 reference's value counts too: within
    its budget nothing is kept; a budget even fp32 cannot meet stops the search; a metric
    that raises is one line."""
    from amptool.convert.search import SearchConfig, search_policy
    from amptool.errors import CheckFailed

    out, _ = reg_run
    base = dict(run=str(out), samples=64, range_safety=None,
                metric=f"{task / 'metrics.py'}:neg_mae")
    found = search_policy(SearchConfig(out=str(tmp_path / "p.toml"), **base,
                                       threshold_flags={"max_metric_drop": 0.05})).to_dict()
    first = found["trials"][0]["metrics"]
    assert found["kept"] == [] and found["metric"] == base["metric"]
    assert first["task_ref"] < 0 and abs(first["task_drop"]) < 0.05 * abs(first["task_ref"])
    with pytest.raises(CheckFailed, match="stricter than fp32 itself"):
        search_policy(SearchConfig(out=str(tmp_path / "q.toml"), **base,
                                   threshold_flags={"max_metric_drop": -1.0}))
    broken = dict(base, metric=f"{task / 'metrics.py'}:broken")
    with pytest.raises(UsageError, match="metrics.py:broken raised KeyError"):
        search_policy(SearchConfig(out=str(tmp_path / "r.toml"), **broken))
