"""Checkpoint conversion on a real training checkpoint: dtypes, untouched entries, formats,
sizes, loading back within fp16 rounding, refusing overwrites, atomic writes."""
import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.convert.ckpt import CkptConfig, convert_checkpoint
from amptool.network.checkpoint import detect_format, load_into_net, read_checkpoint

runner = CliRunner()
FP16_ULP = 2.0 ** -11  # relative rounding of fp16


def _one_line_error(result, code=2):
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amptool: error:"), result.output
    return lines[0]


def _dtypes(path):
    entries = read_checkpoint(path)
    return {k: (v if isinstance(v, str) else str(v.dtype)) for k, v in entries.items()}


@pytest.fixture(scope="module")
def fp16_ckpt(cnn_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("conv") / "half.ckpt"
    result = runner.invoke(app, ["convert", "ckpt", str(cnn_run / "best.ckpt"), str(out),
                                 "--to", "fp16", "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.output)


@pytest.mark.slow
def test_fp16_conversion_of_a_training_checkpoint(cnn_run, fp16_ckpt):
    out, report = fp16_ckpt
    before, after = _dtypes(cnn_run / "best.ckpt"), _dtypes(out)
    assert list(before) == list(after)
    assert after["conv.weight"] == after["fc.weight"] == after["moment1.fc.weight"] == "Float16"
    # integers and strings untouched; the loss scale (65536) does not fit fp16 and stays fp32
    assert after["global_step"] == "Int32" and after["epoch"] == "Int64"
    assert after["model"] == "simplecnn"
    assert report["kept_range"] == ["amptool_loss_scale.scale_value"]
    assert after["amptool_loss_scale.scale_value"] == "Float32"
    assert report["bytes_before"] == os.path.getsize(cnn_run / "best.ckpt")
    assert report["bytes_after"] == os.path.getsize(out)
    assert 0.45 < report["ratio"] < 0.6


def _outputs(net, x):
    import mindspore as ms

    net.set_train(False)
    return net(ms.Tensor(x)).asnumpy()


@pytest.mark.slow
def test_fp16_checkpoint_loads_back_within_rounding(cnn_run, fp16_ckpt):
    import mindspore as ms
    from smalldata import load_dataset

    from amptool.network.models import sample_spec

    out, _ = fp16_ckpt
    spec = sample_spec("simplecnn")
    original = spec.build()
    ms.load_param_into_net(original, ms.load_checkpoint(str(cnn_run / "best.ckpt")))
    restored = spec.build()
    load_into_net(restored, read_checkpoint(out))
    for p, q in zip(original.get_parameters(), restored.get_parameters()):
        assert q.dtype == ms.float32
        a, b = p.asnumpy(), q.asnumpy()
        np.testing.assert_allclose(b, a, rtol=FP16_ULP, atol=6e-8)
        assert not np.array_equal(a, b) or p.name.endswith("bias")  # really rounded
    x = load_dataset("digits", spec.input_shape, 10).val_x[:128]
    ref, got = _outputs(original, x), _outputs(restored, x)
    cosine = float((ref * got).sum() / np.linalg.norm(ref) / np.linalg.norm(got))
    assert cosine > 0.99999 and (ref.argmax(1) == got.argmax(1)).mean() >= 0.99


@pytest.mark.slow
def test_rounding_check_catches_a_planted_fault(cnn_run, fp16_ckpt, tmp_path):
    """A conversion that damages one weight (a sign flip) must fail the same comparison."""
    import mindspore as ms

    from amptool.network.models import sample_spec

    out, _ = fp16_ckpt
    entries = read_checkpoint(out)
    broken = [{"name": k, "data": (-v if k == "fc.bias" else v)} for k, v in entries.items()
              if not isinstance(v, str)]
    ms.save_checkpoint(broken, str(tmp_path / "broken.ckpt"))
    original, restored = sample_spec("simplecnn").build(), sample_spec("simplecnn").build()
    ms.load_param_into_net(original, ms.load_checkpoint(str(cnn_run / "best.ckpt")))
    load_into_net(restored, read_checkpoint(tmp_path / "broken.ckpt"))
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(restored.fc.bias.asnumpy(), original.fc.bias.asnumpy(),
                                   rtol=FP16_ULP, atol=6e-8)


@pytest.mark.slow
def test_safetensors_round_trip(fp16_ckpt, tmp_path):
    out, _ = fp16_ckpt
    st = tmp_path / "half.safetensors"
    report = convert_checkpoint(CkptConfig(str(out), str(st), to="fp16", all_floats=True))
    assert report.format == "safetensors" and sorted(report.dropped) == ["model", "optimizer"]
    back = tmp_path / "full.ckpt"
    report = convert_checkpoint(CkptConfig(str(st), str(back), to="fp32", format="ckpt"))
    half, full = read_checkpoint(st), read_checkpoint(back)
    assert detect_format(back) == "ckpt" and str(full["fc.weight"].dtype) == "Float32"
    np.testing.assert_array_equal(full["fc.weight"].asnumpy(),
                                  half["fc.weight"].asnumpy().astype(np.float32))  # exact widening
    assert str(full["global_step"].dtype) == "Int32"
    assert 1.8 < report.ratio < 2.2


def test_policy_keeps_its_fp32_cells(tmp_path):
    import mindspore as ms

    from amptool.network.models import sample_spec
    from amptool.precision.policy import make_policy, save_policy

    src = tmp_path / "resnet.ckpt"
    ms.save_checkpoint(sample_spec("resnet").build(), str(src))
    default = convert_checkpoint(CkptConfig(str(src), str(tmp_path / "o2.ckpt"), model="resnet"))
    dtypes = _dtypes(tmp_path / "o2.ckpt")
    assert dtypes["layer1.bn1.gamma"] == dtypes["stem.1.moving_variance"] == "Float32"
    assert dtypes["layer1.conv1.weight"] == "Float16" and "O2" in default.policy
    policy = save_policy(make_policy("O3", fp32_cells=["fc"]), tmp_path / "fc.yaml")
    convert_checkpoint(CkptConfig(str(src), str(tmp_path / "fc.ckpt"), model="resnet",
                                  policy=str(policy)))
    dtypes = _dtypes(tmp_path / "fc.ckpt")
    assert dtypes["fc.weight"] == "Float32" and dtypes["layer1.bn1.gamma"] == "Float16"
    result = runner.invoke(app, ["convert", "ckpt", str(src), str(tmp_path / "all.ckpt"),
                                 "--to", "fp16", "--model", "resnet", "--all"])
    assert result.exit_code == 0, result.output
    assert set(_dtypes(tmp_path / "all.ckpt").values()) == {"Float16"}


@pytest.mark.slow
def test_never_overwrites_without_force(fp16_ckpt, cnn_run, tmp_path):
    out, _ = fp16_ckpt
    target = tmp_path / "t.ckpt"
    target.write_bytes(b"keep me")
    os.chmod(target, 0o400)
    args = ["convert", "ckpt", str(out), str(target), "--to", "fp32"]
    assert "already exists" in _one_line_error(runner.invoke(app, args))
    assert target.read_bytes() == b"keep me"
    assert runner.invoke(app, args + ["--force"]).exit_code == 0
    assert _dtypes(target)["fc.weight"] == "Float32"


@pytest.mark.slow
def test_user_mistakes_are_one_line_and_leave_nothing(fp16_ckpt, tmp_path):
    out, _ = fp16_ckpt
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(out.read_bytes()[:5000])
    cases = [
        (["convert", "ckpt", str(corrupt), str(tmp_path / "a.ckpt"), "--to", "fp16"],
         "cannot be read"),
        (["convert", "ckpt", str(tmp_path / "no.ckpt"), str(tmp_path / "a.ckpt"), "--to", "fp16"],
         "does not exist"),
        (["convert", "ckpt", str(out), str(tmp_path / "a.ckpt"), "--to", "int8"],
         "unknown target dtype"),
        (["convert", "ckpt", str(out), str(tmp_path / "a.ckpt"), "--to", "fp16", "--format", "pt"],
         "unknown checkpoint format"),
        (["convert", "ckpt", str(out), str(tmp_path / "a.ckpt"), "--to", "fp16",
          "--model", "lenet5",
          "--policy", str(tmp_path / "missing.toml")], "does not exist"),
        (["convert", "ckpt", str(out), str(out), "--to", "fp16", "--force"], "is the input file"),
    ]
    for args, message in cases:
        assert message in _one_line_error(runner.invoke(app, args))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.ckpt"]


@pytest.mark.slow
def test_weights_only_keeps_just_the_network(cnn_run, tmp_path):
    report = convert_checkpoint(CkptConfig(str(cnn_run / "best.ckpt"), str(tmp_path / "w.ckpt"),
                                           weights_only=True))
    assert set(_dtypes(tmp_path / "w.ckpt")) == {"conv.weight", "conv.bias", "fc.weight", "fc.bias"}
    assert "moment1.fc.weight" in report.dropped and report.ratio < 0.2


def test_range_and_underflow_checks_see_every_chunk(monkeypatch):
    """The checks run a chunk at a time: a value past fp16's range or flushed to zero is
    found in any chunk, the last partial one included; inf and nan are not 'beyond'."""
    from amptool.convert import ckpt

    monkeypatch.setattr(ckpt, "CHUNK", 1000)
    arr = np.zeros((7, 501), np.float32)
    arr[0, 0] = np.inf
    arr[1, 1] = np.nan
    assert not ckpt._beyond_fp16(arr)
    arr.reshape(-1)[3506] = -70000.0  # in the last, partial chunk
    assert ckpt._beyond_fp16(arr)
    arr.reshape(-1)[3506] = 0
    arr.reshape(-1)[[10, 2500, 3506]] = 1e-9  # flushed to zero in fp16
    assert ckpt._flushed(arr, arr.astype(np.float16)) == 3


def test_the_named_network_is_read_without_weights(tmp_path, monkeypatch):
    """The policy's fp32 cells and the parameter names come from the network's structure:
    it is built without weights (a 600M network once cost a full fp32 copy here, 2.8x the
    input file at the peak) and never run, also when the model is a file of the user's."""
    import mindspore as ms

    import amptool.precision.apply

    model = tmp_path / "net.py"
    model.write_text("from mindspore import nn\n\n\ndef build():\n"
                     "    return nn.SequentialCell([nn.Dense(8, 16), nn.LayerNorm((16,)),\n"
                     "                              nn.Dense(16, 4)])\n\n\n"
                     "build.input_signature = 'x:-1x8:float32'\nbuild.num_classes = 4\n")
    src = tmp_path / "w.ckpt"
    ms.save_checkpoint(ms.nn.SequentialCell([ms.nn.Dense(8, 16), ms.nn.LayerNorm((16,)),
                                             ms.nn.Dense(16, 4)]), str(src))
    seen, real = [], amptool.precision.apply.resolve_fp32_cells
    monkeypatch.setattr(amptool.precision.apply, "resolve_fp32_cells",
                        lambda net, policy: seen.append(net) or real(net, policy))
    report = convert_checkpoint(CkptConfig(str(src), str(tmp_path / "h.ckpt"),
                                           model=f"{model}:build"))
    assert len(seen) == 1 and all(p.has_init for p in seen[0].get_parameters())
    dtypes = _dtypes(tmp_path / "h.ckpt")
    assert dtypes["1.gamma"] == dtypes["1.beta"] == "Float32"  # O2 keeps the LayerNorm
    assert dtypes["0.weight"] == dtypes["2.weight"] == "Float16"
    assert report.kept_policy == ["1.gamma", "1.beta"]


def test_a_zoo_network_without_a_signature_converts_by_its_structure(tmp_path):
    """A model-zoo factory (mindcv) declares no input signature; converting needs only the
    network's structure, so no --input-spec is asked for: its BatchNorm stays fp32 under O2,
    its convolutions go fp16. A command that runs the network still asks for one."""
    import mindspore as ms

    model = "mindcv.models.mobilenetv1:mobilenet_v1_025"
    from amptool.network.ckptstream import build_uninitialized
    from amptool.network.models import resolve_model

    spec = resolve_model(model, {"num_classes": 10}, probe=False, signature=False)
    assert spec.inputs == () and spec.input_shape is None
    src = tmp_path / "m.ckpt"
    ms.save_checkpoint(build_uninitialized(spec.build), str(src))
    result = runner.invoke(app, ["convert", "ckpt", str(src), str(tmp_path / "h.ckpt"),
                                 "--to", "fp16", "--model", model,
                                 "--model-arg", "num_classes=10"])
    assert result.exit_code == 0, result.output
    dtypes = _dtypes(tmp_path / "h.ckpt")
    bn = [n for n in dtypes if n.endswith(".gamma")]
    convs = [n for n in dtypes if n.endswith(".weight") and "classifier" not in n]
    assert bn and {dtypes[n] for n in bn} == {"Float32"}
    assert convs and {dtypes[n] for n in convs} == {"Float16"}
    result = runner.invoke(app, ["convert", "search", "--ckpt", str(src), "--model", model,
                                 "--model-arg", "num_classes=10"])
    assert result.exit_code == 2 and "declares no input signature" in result.output
