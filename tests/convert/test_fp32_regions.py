"""Cells kept in fp32 hand their fp32 output on as it is: values beyond float16's range
(65504) pass from one kept cell to the next, the search's all-fp32 trial is the fp32
network, and a planted region of two kept cells is found, exported and passes parity."""
from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.precision.policy import load_policy, make_policy, save_policy

runner = CliRunner()
PLANTED = f"{__file__}:planted"
FP16_MAX = 65504.0
EXACT = 1e-6  # all-fp32 trial vs the fp32 reference: max |diff| <= EXACT x max(1, max |ref|)


def planted():
    """Flatten -> Dense -> Scale (x 1e5) -> LayerNorm -> Dense: the scaled activations exceed
    float16's range, so Scale and LayerNorm must both stay fp32 and pass fp32 between them."""
    from mindspore import nn

    class Scale(nn.Cell):
        def construct(self, x):
            return x * 1e5

    class Planted(nn.Cell):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.fc1 = nn.Dense(28 * 28, 32)
            self.scale = Scale()
            self.norm = nn.LayerNorm((32,))
            self.fc2 = nn.Dense(32, 10)

        def construct(self, x):
            return self.fc2(self.norm(self.scale(self.fc1(self.flatten(x)))))

    return Planted()


planted.input_shape = (1, 28, 28)
planted.num_classes = 10

REGION = make_policy("O3", fp32_cells=["scale", "norm"])


@pytest.fixture
def mode():
    """Run a test in a chosen MindSpore mode and restore the previous one."""
    import mindspore as ms

    from amptool.runtime.device import resolve_device, set_device

    previous = ms.get_context("mode")
    set_device(resolve_device("auto"))
    yield lambda graph: ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
    ms.set_context(mode=previous)


def _seeded_pair():
    """(fp32 net, a second net with the same weights, a batch of inputs)."""
    import mindspore as ms

    ms.set_seed(0)
    ref_net = planted()
    net = planted()
    ms.load_param_into_net(net, {p.name: ms.Parameter(p.data.copy(), name=p.name)
                                 for p in ref_net.get_parameters()})
    x = ms.Tensor(np.random.RandomState(0).rand(16, 1, 28, 28).astype(np.float32))
    return ref_net, net, x


def _scaled_max_abs(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(out - ref).max() / max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("graph", [pytest.param(False, id="pynative"),
                                   pytest.param(True, id="graph", marks=pytest.mark.slow)])
def test_a_kept_region_carries_values_beyond_fp16(mode, graph):
    """Scale computes in fp32 from its fp16 input and hands > 65504 to LayerNorm unharmed;
    with Scale and LayerNorm in fp16 the same values overflow."""
    from amptool.precision.apply import apply_policy

    mode(graph)
    ref_net, net, x = _seeded_pair()
    ref = ref_net(x).asnumpy()
    assert np.abs(ref_net.scale(ref_net.fc1(ref_net.flatten(x))).asnumpy()).max() > FP16_MAX
    out = apply_policy(net, REGION)(x).asnumpy()
    assert out.dtype == np.float32 and np.isfinite(out).all()
    assert _scaled_max_abs(out, ref) < 2e-3  # fp16 rounding of fc1 and fc2 only
    _, net16, _ = _seeded_pair()
    assert not np.isfinite(apply_policy(net16, make_policy("O3"))(x).asnumpy()).all()


def test_kept_cells_output_fp32_and_low_cells_cast_their_inputs(mode):
    """Hooks (eager): fc1 gives float16; the kept Scale takes it and returns float32 beyond
    fp16's range; the kept LayerNorm returns float32; fc2 computes in float16."""
    import mindspore as ms

    from amptool.precision.apply import apply_policy

    mode(False)
    _, net, x = _seeded_pair()
    seen = {}
    for name in ("fc1", "scale", "norm", "fc2"):
        def hook(cell, inputs, output, name=name):
            seen[name] = (inputs[0].dtype, output.dtype, float(np.abs(output.asnumpy()).max()))
        getattr(net, name).register_forward_hook(hook)
    apply_policy(net, REGION)(x)
    assert seen["fc1"][1] == ms.float16
    assert seen["scale"][0] == ms.float16 and seen["scale"][1] == ms.float32
    assert FP16_MAX < seen["scale"][2] < np.inf
    assert seen["norm"][0] == ms.float32 and seen["norm"][1] == ms.float32
    assert seen["fc2"][0] == ms.float32 and seen["fc2"][1] == ms.float16


def test_binary_op_in_a_low_precision_parent_promotes_to_fp32(mode):
    """Graph mode: an fp16 parent adding a kept child's fp32 output (> 65504) to an fp16
    child's output computes in fp32; the network's output is cast to fp32."""
    import mindspore as ms
    from mindspore import nn

    from amptool.precision.apply import apply_policy

    class Big(nn.Cell):
        def construct(self, x):
            return x * 1e5

    class Small(nn.Cell):
        def construct(self, x):
            return x * 0.5

    class Parent(nn.Cell):
        def __init__(self):
            super().__init__()
            self.big = Big()
            self.small = Small()

        def construct(self, x):
            return self.big(x) + self.small(x)

    mode(True)
    x = ms.Tensor(np.array([[1.0, 2.0, 3.0]], np.float32))
    out = apply_policy(Parent(), make_policy("O3", fp32_cells=["big"]))(x).asnumpy()
    np.testing.assert_allclose(out, [[100000.5, 200001.0, 300001.5]], rtol=1e-6)


@pytest.mark.slow
def test_a_kept_softmax_feeding_a_matmul_compiles_in_graph_mode(mode):
    """The transformer's attention multiplies its kept softmax's output with float16 values
    (ops.matmul refuses mixed dtypes in graph mode): that output, always within float16's
    range, is cast back, so the graph compiles and computes close to fp32."""
    import mindspore as ms

    from amptool.network.models import sample_spec
    from amptool.precision.apply import apply_policy

    mode(True)
    ms.set_seed(0)
    spec = sample_spec("transformer")
    ref_net, net = spec.build(), spec.build()
    ms.load_param_into_net(net, {p.name: ms.Parameter(p.data.copy(), name=p.name)
                                 for p in ref_net.get_parameters()})
    x = ms.Tensor(np.random.RandomState(0).rand(8, 1, 28, 28).astype(np.float32))
    ref = ref_net(x).asnumpy()
    out = apply_policy(net, make_policy("O3", fp32_types=["Softmax", "LayerNorm"]))(x).asnumpy()
    cosine = float(np.dot(out.ravel(), ref.ravel()) / np.linalg.norm(out) / np.linalg.norm(ref))
    assert cosine > 0.999 and _scaled_max_abs(out, ref) < 5e-3


def test_a_cell_whose_sub_cells_are_all_kept_is_kept(mode):
    """Keeping every leaf keeps the root (''): the whole network then computes in fp32."""
    from amptool.precision.apply import (apply_policy, cell_dtypes, low_precision_params,
                                         resolve_fp32_cells)

    mode(False)
    ref_net, net, x = _seeded_pair()
    leaves = ["flatten", "fc1", "scale", "norm", "fc2"]
    assert list(resolve_fp32_cells(net, REGION)) == ["scale", "norm"]
    every = make_policy("O3", fp32_cells=leaves)
    assert list(resolve_fp32_cells(net, every)) == [""]
    assert low_precision_params(net, every) == []
    assert {row[2] for row in cell_dtypes(net, every)} == {"float32"}
    out = apply_policy(net, every)(x).asnumpy()
    assert _scaled_max_abs(out, ref_net(x).asnumpy()) <= EXACT
    forced = make_policy("O3", fp32_cells=leaves[1:], fp16_cells=["flatten"])
    assert list(resolve_fp32_cells(net, forced)) == leaves[1:]


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    """The planted network trained in fp32 for one epoch on the bundled digits."""
    from amptool.train.config import TrainConfig
    from amptool.train.run import run_training

    out = tmp_path_factory.mktemp("planted")
    summary = run_training(TrainConfig(model=PLANTED, amp_level="O0", epochs=1, out=str(out)))
    assert summary.val_acc > 0.5
    return out


@pytest.fixture(scope="module")
def planted_search(planted_run, tmp_path_factory):
    from amptool.convert.search import SearchConfig, search_policy

    out = tmp_path_factory.mktemp("planted_search") / "planted.toml"
    # the trials alone (no range pass): they must find the region by themselves
    return search_policy(SearchConfig(run=str(planted_run), samples=128, out=str(out),
                                      range_safety=None))


def _reference(run, samples):
    import mindspore as ms

    from amptool.convert.subject import load_subject
    from amptool.network.checkpoint import build_with_weights

    src = load_subject(str(run), None, None, None, samples)
    return build_with_weights(src.spec, src.weights, "ckpt")(ms.Tensor(src.x)).asnumpy()


def _all_fp32_trial(result):
    trial = next(t for t in result.trials if t.phase == "all-fp32")
    assert trial.fp32 == result.candidates
    return trial


@pytest.mark.slow
def test_all_fp32_trial_equals_the_fp32_reference(planted_run, planted_search, trap_run,
                                                   tmp_path):
    """On the planted network and on trapmlp (whose root multiplies by 8 in its own
    construct), every candidate in fp32 computes exactly what the fp32 network does."""
    from amptool.convert.search import SearchConfig, search_policy

    trap = search_policy(SearchConfig(run=str(trap_run), samples=128, range_safety=None,
                                      out=str(tmp_path / "trap.toml")))
    for run, result in ((planted_run, planted_search), (trap_run, trap)):
        ref = _reference(run, 128)
        trial = _all_fp32_trial(result)
        assert trial.passed
        assert trial.metrics.max_abs <= EXACT * max(1.0, float(np.abs(ref).max()))
    assert trap.kept == ["norm"]


@pytest.mark.slow
def test_search_keeps_the_planted_region(planted_search):
    result = planted_search
    assert result.kept == ["scale", "norm"]
    assert result.policy.fp32_cells == ("scale", "norm") and result.policy.level == "O3"
    assert not result.trials[0].passed and result.trials[0].phase == "all-fp16"
    assert result.confirm.passed and result.confirm.mode == "graph"


@pytest.mark.slow
def test_range_pass_finds_the_planted_region_before_any_trial(planted_run, tmp_path):
    """The scale's output and the norm's input leave fp16's range: both kept before the
    trials, and the one trial (all the rest in fp16) passes."""
    from amptool.convert.search import SearchConfig, search_policy

    result = search_policy(SearchConfig(run=str(planted_run), samples=128,
                                        out=str(tmp_path / "planted.toml")))
    assert result.kept == ["scale", "norm"]
    assert [r["path"] for r in result.ranges] == ["scale", "norm"]
    assert len(result.trials) <= 1 and result.confirm.passed


@pytest.mark.slow
def test_planted_region_export_passes_parity_and_all_fp16_fails(planted_run, planted_search,
                                                                 tmp_path):
    """search -> export --policy (true fp16 MindIR) -> amptool parity; O3 export fails."""
    o3 = save_policy(make_policy("O3"), tmp_path / "o3.toml")
    for name, policy, precision in (("found", planted_search.out, "both"), ("o3", o3, "fp16")):
        result = runner.invoke(app, ["export", "--run", str(planted_run), "--policy", str(policy),
                                     "--precision", precision, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    assert load_policy(planted_search.out).fp32_cells == ("scale", "norm")
    ref = next((tmp_path / "found").glob("*_fp32.mindir"))
    good = runner.invoke(app, ["parity", str(ref), str(next((tmp_path / "found").glob(
        "*_fp16.mindir"))), "--samples", "128"])
    assert good.exit_code == 0, good.output
    bad = runner.invoke(app, ["parity", str(ref), str(next((tmp_path / "o3").glob(
        "*_fp16.mindir"))), "--samples", "128"])
    assert bad.exit_code == 1 and "parity failed" in bad.output, bad.output


def idle_leaf():
    """The planted network plus a cell its construct never calls and an operator of its own."""
    net = planted()
    from mindspore import nn

    class WithIdle(type(net)):
        def __init__(self):
            super().__init__()
            self.unused = nn.ReLU()

        def construct(self, x):
            return self.fc2(self.norm(self.scale(self.fc1(self.flatten(x)))) * 3.0)

    return WithIdle()


idle_leaf.input_shape = (1, 28, 28)
idle_leaf.num_classes = 10


@pytest.mark.slow
def test_all_fp32_trial_off_the_reference_is_reported(mode, tmp_path):
    """With a cell never called, the root cannot be kept, its own `* 3.0` stays float16 and
    the all-fp32 trial is off the reference: CheckFailed names that instead of the limits."""
    import mindspore as ms

    mode(False)
    ms.set_seed(0)
    ckpt = tmp_path / "idle.ckpt"
    ms.save_checkpoint(idle_leaf(), str(ckpt))
    result = runner.invoke(app, ["convert", "search", "--ckpt", str(ckpt), "--model",
                                 f"{__file__}:idle_leaf", "--samples", "64",
                                 "--range-safety", "off", "--out", str(tmp_path / "p.toml")])
    assert result.exit_code == 1, result.output
    error = result.output.strip().splitlines()[-1]
    assert "still differs from the fp32 reference" in error and "(unused)" in error, error
    assert "loosen" not in error and not (tmp_path / "p.toml").exists()
