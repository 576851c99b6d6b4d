"""ONNX export of networks whose operators MindSpore's exporter lacks (resnet18's in-place
adds and mobilenet_v3's HSwish/HSigmoid are exported and run against their MindIR by the zoo's
own flows, tests/zoo/checks.py).

This file is also the model file the tests export from (``test_onnx_zoo.py:factory``), so
its top level imports nothing from the test package.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__)


def _declare(factory, shape):
    factory.input_shape, factory.num_classes = shape, 10
    return factory


def small_vit():
    """Attention with ops.Unstack, exact GELU (erf)."""
    from functools import partial

    from mindcv.models.vit import VisionTransformer
    from mindspore import nn

    return VisionTransformer(image_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4,
                             num_classes=10, act_layer=partial(nn.GELU, approximate=False))


def closure_residual_net():
    """``out += ...`` in a cell class defined inside the factory (a closure over ``scale``)."""
    from mindspore import nn, ops

    scale = 0.5

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(16, 16)

        def construct(self, x):
            out = ops.relu(self.fc(x))
            out += x * scale
            return out

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.fc = nn.Dense(48, 16)
            self.block = Block()
            self.head = nn.Dense(16, 10)

        def construct(self, x):
            return self.head(self.block(self.fc(self.flatten(x))))

    return Net()


def erf_net():
    """A cell calling ops.erf inside its construct: no rewrite reaches it."""
    from mindspore import nn, ops

    class ErfHead(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(16, 10)

        def construct(self, x):
            return self.fc(ops.erf(x))

    class ErfNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.fc = nn.Dense(64, 16)
            self.head = ErfHead()

        def construct(self, x):
            return self.head(self.fc(self.flatten(x)))

    return ErfNet()


def batch_reading_net():
    """A head reading the batch size from its input's shape behind a BatchNorm2d (which
    holds a Shape primitive of its own, for checks on its input): mindyolo's YOLOv8 head
    does this (``shape = x[0].shape``), and its C2f reads a channel count the same way."""
    from mindspore import nn

    class Head(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(8 * 4 * 4, 10)

        def construct(self, x):
            half = x.shape[1] // 2  # a channel count: a constant under a dynamic batch
            return self.fc(x.view(x.shape[0], -1)) * (half / half)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 8, 3, pad_mode="same")
            self.bn = nn.BatchNorm2d(8)
            self.pool = nn.MaxPool2d(2, 2)
            self.head = Head()

        def construct(self, x):
            return self.head(self.pool(self.bn(self.conv(x))))

    return Net()


_declare(small_vit, (3, 32, 32))
_declare(batch_reading_net, (1, 8, 8))
_declare(closure_residual_net, (3, 4, 4))
_declare(erf_net, (1, 8, 8))


def _seeded_checkpoint(factory, path: Path) -> Path:
    import mindspore as ms

    ms.set_seed(0)
    ms.save_checkpoint(factory(), str(path))
    return path


def _export(factory, tmp_path, dynamic: bool, formats=("ONNX",)):
    """(format, precision) -> path of the seeded ``factory`` exported in fp32 and fp16."""
    from amptool.export.api import ExportConfig, export

    ckpt = _seeded_checkpoint(factory, tmp_path / f"{factory.__name__}.ckpt")
    results = export(ExportConfig(
        ckpt=str(ckpt), model=f"{HERE}:{factory.__name__}", data="none",
        formats=formats, precision="both", dynamic_batch=dynamic, batch_size=2,
        out=str(tmp_path / "out")))
    return {(r.format, r.precision): r.path for r in results}


def _eager(factory, ckpt: Path, x: np.ndarray) -> np.ndarray:
    """The fp32 network with the checkpoint's weights, run eagerly on ``x``."""
    import mindspore as ms

    from amptool.network.checkpoint import load_into_net, read_checkpoint
    from amptool.runtime.device import execution_mode

    net = factory()
    load_into_net(net, read_checkpoint(ckpt))
    net.set_train(False)
    with execution_mode(graph=False):
        return net(ms.Tensor(x)).asnumpy()


def _run_onnx(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    arg = session.get_inputs()[0]
    dtype = np.float16 if arg.type == "tensor(float16)" else np.float32
    return session.run(None, {arg.name: x.astype(dtype)})[0]


@pytest.mark.slow
@pytest.mark.parametrize("factory,dynamic", [(small_vit, False),  # ViT: BroadcastTo(batch)
                                             (closure_residual_net, True)],
                         ids=["small_vit", "closure"])
def test_mindcv_network_exports_runnable_onnx_matching_mindir(factory, dynamic, tmp_path):
    """Both precisions exported to ONNX; the fp32 graph computes what the network does
    (MINDIR of these networks, and of mindcv's default ViT, is exported and compared by the
    zoo's flows, tests/zoo)."""
    from .conftest import FP32_REL, scaled_max_abs

    paths = _export(factory, tmp_path, dynamic)
    assert set(paths) == {("ONNX", p) for p in ("fp32", "fp16")}
    x = np.random.default_rng(0).standard_normal((2, *factory.input_shape)).astype(np.float32)
    ref = _eager(factory, tmp_path / f"{factory.__name__}.ckpt", x)
    assert scaled_max_abs(_run_onnx(paths[("ONNX", "fp32")], x), ref) <= FP32_REL
    fp16 = _run_onnx(paths[("ONNX", "fp16")], x)
    assert fp16.shape == ref.shape == (2, 10)


@pytest.mark.slow
def test_a_dynamic_batch_read_from_the_shape_is_named_in_the_cell_reading_it(tmp_path):
    """Under a dynamic batch the exporter meets a Shape operator; the error names the head
    that reads the batch, not the BatchNorm2d before it (which holds a Shape primitive it
    never leaves in the graph)."""
    from amptool.export.onnx import OnnxUnsupported

    with pytest.raises(OnnxUnsupported, match=r"operator Shape to ONNX \(used in cell head\)"):
        _export(batch_reading_net, tmp_path, dynamic=True)
    (tmp_path / "fixed").mkdir()
    assert set(_export(batch_reading_net, tmp_path / "fixed", dynamic=False)) == {
        ("ONNX", p) for p in ("fp32", "fp16")}


@pytest.mark.slow
def test_unreachable_operator_is_one_line_naming_the_cell_and_writes_nothing(tmp_path):
    from typer.testing import CliRunner

    from amptool.cli import app

    ckpt = _seeded_checkpoint(erf_net, tmp_path / "erf.ckpt")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["export", "--ckpt", str(ckpt), "--model",
                                      f"{HERE}:erf_net", "--data", "none", "-f", "MINDIR,ONNX",
                                      "--out", str(out)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.strip()]
    assert len(errors) == 1, result.output
    assert "cannot convert operator Erf to ONNX (used in cell head)" in errors[0]
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.slow
def test_pipeline_skips_onnx_with_one_warning_when_an_operator_is_unsupported(tmp_path):
    from amptool.pipeline import PipelineConfig, run_pipeline
    from amptool.train.config import TrainConfig

    events = []
    train = TrainConfig(model=f"{HERE}:erf_net", data="synthetic", epochs=1, batch_size=64)
    summary = run_pipeline(PipelineConfig(train=train, out=str(tmp_path / "pipe"), samples=32),
                           on_event=events.append).to_dict()
    warnings = [e.message for e in events if e.kind == "warning"]
    assert len(warnings) == 1 and "ONNX skipped" in warnings[0] and "Erf" in warnings[0]
    assert summary["warnings"] == warnings
    assert {r["format"] for r in summary["artefacts"]} == {"MINDIR"}
    assert json.loads((tmp_path / "pipe" / "summary.json").read_text())["warnings"] == warnings
    assert not list((tmp_path / "pipe" / "export").glob("*.onnx"))
    from amptool.export.onnx import OnnxUnsupported
    from amptool.pipeline import export_artefacts

    asked = PipelineConfig(train=train, out=str(tmp_path / "pipe"), onnx="on")
    written = tmp_path / "pipe" / "export"
    before = {p: p.stat().st_mtime_ns for p in written.rglob("*") if p.is_file()}
    with pytest.raises(OnnxUnsupported, match="operator Erf"):  # --onnx on: a failure fails
        export_artefacts(asked, tmp_path / "pipe", "CPU", ("MINDIR", "ONNX"), events.append)
    # all or nothing: the MINDIR artefacts the first run wrote are neither rewritten nor lost
    assert {p: p.stat().st_mtime_ns for p in written.rglob("*") if p.is_file()} == before


def _rewrite_cases() -> dict:
    """Name -> (network holding the cell or primitive to rewrite, input shape, input scale)."""
    import mindspore as ms
    from mindspore import nn, ops

    class Holder(nn.Cell):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def construct(self, x):
            return self.inner(x)

    class UnstackUser(nn.Cell):
        def __init__(self):
            super().__init__()
            self.unstack = ops.Unstack(axis=1)

        def construct(self, x):
            a, b, c = self.unstack(x)
            return a * 2.0 + b - c

    def group_norm():
        norm = nn.GroupNorm(4, 8)
        rng = np.random.default_rng(1)
        norm.gamma.set_data(ms.Tensor(rng.standard_normal(8).astype(np.float32)))
        norm.beta.set_data(ms.Tensor(rng.standard_normal(8).astype(np.float32)))
        return Holder(norm)

    class Inverted(nn.Cell):
        """``~`` on a bool mask and ``Tensor.cumsum`` over it, as EdgeNeXt's encoding does."""

        def construct(self, x):
            mask = ~(x > 0.5)
            return x + mask.cumsum(1, dtype=ms.float32) - ops.cumsum(x, 3)

    class Resized(nn.Cell):
        """Bilinear ``ops.interpolate`` to a given size, down and up (MobileViT's folding)."""

        def __init__(self, corners):
            super().__init__()
            self.corners = corners

        def construct(self, x):
            small = ops.interpolate(x, size=(4, 3), mode="bilinear", align_corners=self.corners)
            return ops.interpolate(small, size=(7, 9), mode="bilinear",
                                   align_corners=self.corners)

    class Normalized(nn.Cell):
        """``ops.L2Normalize`` as an attribute and made in ``construct`` (EdgeNeXt's XCA)."""

        def __init__(self):
            super().__init__()
            self.rows = ops.L2Normalize(axis=2, epsilon=1e-3)

        def construct(self, x):
            return self.rows(x) + ops.L2Normalize(-1)(x) * 3.0

    return {"HSwish": (lambda: Holder(nn.HSwish()), (4, 8, 6, 6), 4.0),
            "L2Normalize": (Normalized, (4, 3, 5, 6), 0.3),
            "invert-cumsum": (Inverted, (4, 3, 5, 6), 1.0),
            "bilinear-corners": (lambda: Resized(True), (4, 3, 6, 6), 2.0),
            "bilinear-half-pixel": (lambda: Resized(False), (4, 3, 6, 6), 2.0),
            "HSigmoid": (lambda: Holder(nn.HSigmoid()), (4, 8, 6, 6), 4.0),
            "GELU-exact": (lambda: Holder(nn.GELU(approximate=False)), (4, 8, 6, 6), 3.0),
            "GroupNorm": (group_norm, (4, 8, 6, 6), 3.0),
            "Unstack": (UnstackUser, (4, 3, 6, 6), 1.0)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["HSwish", "HSigmoid", "GELU-exact", "GroupNorm", "Unstack",
                                  "invert-cumsum", "bilinear-corners", "bilinear-half-pixel",
                                  "L2Normalize"])
def test_each_rewrite_matches_the_mindspore_cell_it_replaces(name, tmp_path):
    import mindspore as ms

    from amptool.export.onnx import write

    from .conftest import FP32_REL, scaled_max_abs

    make, shape, scale = _rewrite_cases()[name]
    net = make()
    net.set_train(False)
    x = (np.random.default_rng(0).standard_normal(shape) * scale).astype(np.float32)
    ref = net(ms.Tensor(x)).asnumpy()
    path = tmp_path / "cell.onnx"
    write(net, [ms.Tensor(shape=[None, *shape[1:]], dtype=ms.float32)], path, dynamic_batch=True)
    assert scaled_max_abs(_run_onnx(str(path), x), ref) <= FP32_REL


def _mixed_mul_model():
    from onnx import TensorProto, helper, numpy_helper

    scale = numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "scale")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])], "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def test_mixed_float16_float32_inputs_get_a_cast_to_float32(tmp_path):
    import onnx
    import onnxruntime as ort

    from amptool.export.onnx_check import cast_mixed_inputs

    model = _mixed_mul_model()
    with pytest.raises(Exception, match="bound to different types"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert cast_mixed_inputs(model) == 1
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = session.run(None, {"x": np.array([3.0, -1.5], np.float16)})[0]
    assert y.dtype == np.float32 and y.tolist() == [1.5, -3.0]
