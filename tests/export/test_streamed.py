"""The single-file MindIR amptool streams equals the one ``mindspore.export`` writes.

``export.mindir.write`` has MindSpore write the split form and streams the single file
from it, one parameter at a time (see its module's docstring). The file must parse as
the message MindSpore writes itself: the same parameters in the same order with the same
bytes, the same graph, the same outputs; and it loads in ``mindspore.load``.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # exports real networks


def _net(half: bool):
    """Dense + BatchNorm (statistics that are not trained) + LayerNorm + an int32 and a
    float16 parameter; ``half``: computing in float16 with float16 weights, as an fp16
    artefact's network does (the norms kept in fp32)."""
    import mindspore as ms
    from mindspore import Parameter, nn, ops

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(12, 32)
            self.bn = nn.BatchNorm1d(32)
            self.norm = nn.LayerNorm((32,))
            self.fc2 = nn.Dense(32, 5)
            self.offset = Parameter(ms.Tensor(np.arange(5, dtype=np.int32)), name="offset",
                                    requires_grad=False)
            self.gain = Parameter(ms.Tensor(np.full((5,), 1.5, np.float16)), name="gain")

        def construct(self, x):
            h = self.norm(self.bn(ops.relu(self.fc1(x))))
            out = self.fc2(h) + ops.cast(self.offset, ms.float32)
            return out * ops.cast(self.gain, out.dtype)

    ms.set_seed(3)
    net = Net()
    net.set_train(False)
    if half:
        for cell in (net.fc1, net.fc2):
            cell.to_float(ms.float16)
            for param in cell.get_parameters():
                param.set_dtype(ms.float16)
    return net


def _model(path):
    from mindspore.train import mind_ir_pb2

    model = mind_ir_pb2.ModelProto()
    model.ParseFromString(path.read_bytes())
    return model


def _run(path, x):
    import mindspore as ms
    from mindspore import nn

    return nn.GraphCell(ms.load(str(path)))(ms.Tensor(x)).asnumpy()


@pytest.mark.parametrize("half", [False, True], ids=["fp32", "fp16"])
def test_the_streamed_file_is_the_message_mindspore_writes(half, tmp_path):
    import mindspore as ms

    from amptool.artefact.mindir import _stored, describe, read_weights
    from amptool.export import mindir

    x = np.random.default_rng(0).standard_normal((4, 12)).astype(np.float32)
    inputs = [ms.Tensor(x)]
    net = _net(half)
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    written, facts = mindir.write(net, inputs, tmp_path / "ours" / "n.mindir")
    ms.export(net, *inputs, file_name=str(tmp_path / "theirs" / "n"), file_format="MINDIR")
    theirs = tmp_path / "theirs" / "n.mindir"
    assert written == tmp_path / "ours" / "n.mindir"
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["n.mindir"]  # no parts

    ours_model, their_model = _model(written), _model(theirs)
    assert [p.name for p in ours_model.graph.parameter] == \
        [p.name for p in their_model.graph.parameter]
    for mine, their in zip(ours_model.graph.parameter, their_model.graph.parameter):
        assert not mine.HasField("external_data")
        assert mine == their, mine.name  # dtype, shape, bytes and every other field
    assert ours_model == their_model  # the graph too: one message, parsed either way
    assert len(ours_model.graph.parameter) == 12  # the int32 and fp16 ones too

    ours_weights, their_weights = read_weights(written), read_weights(theirs)
    assert ours_weights.keys() == their_weights.keys()
    for name, value in ours_weights.items():
        assert value.dtype == their_weights[name].dtype
        assert value.tobytes() == their_weights[name].tobytes(), name
    for model, weights in ((ours_model, ours_weights), (their_model, their_weights)):
        # read a parameter at a time: what parsing the whole message gives
        assert {k: v.tobytes() for k, v in weights.items()} == \
            {name: param.raw_data for _, name, _, _, param in _stored(model)}
    assert facts == describe(theirs)
    assert np.array_equal(_run(written, x), _run(theirs, x))
    if not half:  # and what the network computes (eager fp16 rounds elsewhere)
        assert np.array_equal(_run(written, x), net(ms.Tensor(x)).asnumpy())


def test_past_the_limit_mindspore_writes_the_split_form_itself(tmp_path, monkeypatch):
    """``AMPTOOL_SPLIT_BYTES`` under the weights: the split form, as MindSpore writes it
    (nothing streamed, facts read from the graph file by the caller)."""
    import mindspore as ms

    from amptool.export import mindir

    monkeypatch.setenv("AMPTOOL_SPLIT_BYTES", "1024")
    x = np.ones((2, 12), np.float32)
    written, facts = mindir.write(_net(False), [ms.Tensor(x)], tmp_path / "n.mindir")
    assert written.name == "n_graph.mindir" and facts is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n_graph.mindir", "n_variables"]


def test_an_encrypted_mindir_is_mindspores_own(tmp_path):
    """MindSpore encrypts the whole message: with a key the file is its own, whole."""
    import mindspore as ms

    from amptool.artefact.mindir import is_encrypted, read_weights
    from amptool.export import mindir

    key = bytes(range(16))
    net = _net(False)
    x = np.ones((2, 12), np.float32)
    written, facts = mindir.write(net, [ms.Tensor(x)], tmp_path / "n.mindir", key=key)
    assert facts is None and is_encrypted(written)
    weights = read_weights(written, key)
    assert weights["fc1.weight"].tobytes() == net.fc1.weight.asnumpy().tobytes()


def test_a_written_networks_weights_are_let_go(tmp_path):
    """MindSpore keeps a compiled ``construct(self, *args)`` cell (the export wrapper's)
    alive: the writer frees its weights itself once its artefacts are written."""
    import gc

    import mindspore as ms
    from mindspore import nn

    from amptool.export import mindir
    from amptool.export.writer import _let_go
    from amptool.precision.apply import cast_outputs

    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096

    net = cast_outputs(nn.SequentialCell([nn.Dense(2048, 2048) for _ in range(6)]), None)
    weights = sum(p.nbytes for p in net.get_parameters())  # 100 MB
    mindir.write(net, [ms.Tensor(np.ones((1, 2048), np.float32))], tmp_path / "n.mindir")
    gc.collect()
    before = rss()
    _let_go(net)
    del net
    gc.collect()
    assert before - rss() > 0.8 * weights


def test_each_network_is_let_go_once(sample_runs, tmp_path, monkeypatch):
    """Each precision's network is freed once after its last artefact, by its writer: the
    MindIR writer mid-stream, the ONNX one once MindSpore has written the file (before the
    file is read back)."""
    from amptool.export import writer
    from amptool.export.api import ExportConfig, export

    calls, real = [], writer._let_go
    monkeypatch.setattr(writer, "_let_go", lambda net, *done: calls.append(bool(done))
                        or real(net, *done))  # True: called by the writer
    results = export(ExportConfig(run=str(sample_runs.get("simplecnn")), formats=("MINDIR",),
                                  out=str(tmp_path / "m")))
    assert len(results) == 2 and calls == [True, True]  # fp32, fp16: by the writer
    calls.clear()
    export(ExportConfig(run=str(sample_runs.get("simplecnn")), formats=("MINDIR", "ONNX"),
                        precision="fp32", out=str(tmp_path / "o")))
    assert calls == [True]  # ONNX writes last and lets it go as soon as the file is out


def test_a_one_file_onnx_is_rewritten_without_parsing_its_weights(tmp_path):
    """The ONNX writer renames outputs and casts mixed inputs on the graph read without its
    initializers' bytes, then writes the initializers back from the file as they were: the
    result is the model a whole parse and rewrite gives, field for field."""
    import mindspore as ms
    import onnx
    from mindspore import nn

    from amptool.export.onnx import _read_lean, _write_lean
    from amptool.export.onnx_check import cast_mixed_inputs, rename_outputs

    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 4))
    path = tmp_path / "n.onnx"
    ms.onnx.export(net, ms.Tensor(np.ones((2, 16), np.float32)), file_name=str(path),
                   input_names=["input0"])
    whole = onnx.load(str(path))
    rename_outputs(whole)
    cast_mixed_inputs(whole)
    model, spans = _read_lean(path)
    assert len(spans) == len(whole.graph.initializer) == 4
    assert all(not t.raw_data for t in model.graph.initializer)
    rename_outputs(model)
    cast_mixed_inputs(model)
    _write_lean(model, spans, path)
    got = onnx.load(str(path))
    onnx.checker.check_model(str(path))
    for field in ("node", "input", "output"):
        assert [x.SerializeToString() for x in getattr(got.graph, field)] == \
            [x.SerializeToString() for x in getattr(whole.graph, field)], field
    assert {t.name: t.SerializeToString() for t in got.graph.initializer} == \
        {t.name: t.SerializeToString() for t in whole.graph.initializer}
    assert got.opset_import == whole.opset_import and got.graph.output[0].name == "output0"
