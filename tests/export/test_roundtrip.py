"""Every sample model x fp32/fp16 x MINDIR/ONNX: export, load, run, compare with the network."""
from __future__ import annotations

import numpy as np
import pytest

from amptool.artefact.runners import load_runner
from amptool.errors import UsageError

from .conftest import FP32_REL, MODELS, cosine, scaled_max_abs

pytestmark = pytest.mark.slow  # trains or exports real networks

TIE = 4e-3  # relative fp16 resolution (4 ulps): a closer top-2 race is a tie, not a fault


def fp16_checks(out: np.ndarray, ref: np.ndarray) -> tuple:
    """(cosine >= 0.999, identical top-1 on every sample that is not a near-tie in fp32).

    Near-ties (top-2 gap under TIE x the sample's largest |logit|) must be under 5% of the split.
    """
    top2 = np.sort(ref, axis=1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) > TIE * np.abs(ref).max(axis=1)
    same = bool(np.array_equal(out.argmax(1)[decided], ref.argmax(1)[decided]))
    return cosine(out, ref) >= 0.999, same and decided.mean() >= 0.95


@pytest.mark.parametrize("fmt", ["MINDIR", "ONNX"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("model", MODELS)
def test_artefact_matches_network(model, precision, fmt, exports, references):
    result = exports.get(model)[(fmt, precision)]
    x, y, ref = references(model)
    runner = load_runner(result.path)
    assert runner.format == fmt and runner.precision == precision
    assert runner.inputs[0]["shape"] == [-1, *result.manifest.model.input_shape]
    out = runner.run([x])[0]
    assert out.shape == ref.shape and out.dtype == np.float32
    if precision == "fp32":
        assert scaled_max_abs(out, ref) <= FP32_REL
    else:
        close, same_top1 = fp16_checks(out, ref)
        top2 = np.sort(ref, axis=1)[:, -2:]
        ties = ((top2[:, 1] - top2[:, 0]) <= TIE * np.abs(ref).max(axis=1)).mean()
        assert close and same_top1, (cosine(out, ref), (out.argmax(1) != ref.argmax(1)).sum(), ties)
    # dynamic batch: batches of 1 and 7 give the rows of the full batch
    for n in (1, 7):
        part = runner.run([x[:n]])[0]
        assert part.shape == (n, ref.shape[1])
        scale = max(1.0, float(np.abs(out).max()))
        np.testing.assert_allclose(part, out[:n], rtol=1e-3,
                                   atol=(1e-3 if precision == "fp16" else FP32_REL) * scale)


@pytest.mark.parametrize("model", MODELS)
def test_fp16_weights_are_the_checkpoint_halved(model, exports, runs):
    """fp16 stores exactly the checkpoint rounded to fp16, except the policy's fp32 cells."""
    from amptool.artefact import mindir, onnx
    from amptool.network.checkpoint import read_checkpoint
    from amptool.network.models import resolve_model
    from amptool.precision.apply import low_precision_params, resolve_fp32_cells
    from amptool.documents.door import to_json
    from amptool.precision.policy import export_policy, policy_from_dict

    got = exports.get(model)
    manifest = got[("MINDIR", "fp16")].manifest
    spec = resolve_model(model)
    net = spec.build()
    policy = export_policy(policy_from_dict(to_json(manifest.source_policy)))
    low = {p.name for p in low_precision_params(net, policy)}
    kept = {p.name for c in resolve_fp32_cells(net, policy).values() for p in c.get_parameters()}
    names = {p.name for p in net.get_parameters()}
    ckpt = {k: v.asnumpy() for k, v in read_checkpoint(runs.get(model) / "best.ckpt").items()
            if k in names}
    for module, fmt in ((mindir, "MINDIR"), (onnx, "ONNX")):
        w32 = module.read_weights(got[(fmt, "fp32")].path)
        w16 = module.read_weights(got[(fmt, "fp16")].path)
        assert set(w32) == names and set(w16) == names
        for name in names:
            assert np.array_equal(w32[name], ckpt[name]), name
            if name in low:
                assert w16[name].dtype == np.float16
                assert np.array_equal(w16[name], ckpt[name].astype(np.float16)), name
            else:
                assert w16[name].dtype == np.float32 and np.array_equal(w16[name], ckpt[name])
        p32 = got[(fmt, "fp32")].manifest.params
        p16 = got[(fmt, "fp16")].manifest.params
        kept_elems = sum(int(np.prod(ckpt[n].shape)) for n in names - low)
        assert p16.count == p32.count
        assert p16.bytes * 2 == p32.bytes + kept_elems * 4  # half, plus fp32-kept params
        assert p16.dtypes.get("float32", 0) == kept_elems
    if model in ("resnet", "transformer"):
        assert kept and kept == names - low  # BatchNorm / LayerNorm weights stay fp32
    else:
        assert low == names  # trapmlp's fp32 cell (norm) has no weights


def test_planted_fp16_fault_is_caught(runs, references, tmp_path):
    """trapmlp exported with plain O2 (its unsafe cell in fp16) fails the fp16 checks."""
    from amptool.export.api import ExportConfig, export

    results = export(ExportConfig(run=str(runs.get("trapmlp")), precision="fp16",
                                  amp_level="O2", dynamic_batch=True, out=str(tmp_path)))
    x, _, ref = references("trapmlp")
    out = load_runner(results[0].path).run([x])[0]
    assert results[0].manifest.policy.fp32_cells == []
    assert fp16_checks(out, ref) != (True, True)
    assert cosine(out, ref) < 0.99


def test_fp32_tolerance_catches_fp16_error(exports, references):
    """The fp32 bound is tight enough to tell an fp16 graph from an fp32 one."""
    x, _, ref = references("simplecnn")
    out = load_runner(exports.get("simplecnn")[("MINDIR", "fp16")].path).run([x])[0]
    assert scaled_max_abs(out, ref) > 10 * FP32_REL


def test_a_mindir_with_cut_parameter_data_is_one_usage_error(exports, tmp_path):
    """A file that parses but whose parameter bytes do not fill its shape: UsageError, and
    the weights are simply unreadable where parity only wants them for localization."""
    from mindspore.train import mind_ir_pb2

    from amptool.artefact import mindir
    from amptool.artefact.readers import stored_weights

    model = mind_ir_pb2.ModelProto()
    with open(exports.get(MODELS[0])[("MINDIR", "fp32")].path, "rb") as fh:
        model.ParseFromString(fh.read())
    param = next(p for p in model.graph.parameter if len(p.raw_data) > 4)
    param.raw_data = param.raw_data[:-4]
    cut = tmp_path / "cut.mindir"
    cut.write_bytes(model.SerializeToString())
    with pytest.raises(UsageError, match=r"cut.mindir is corrupt: parameter .* holds \d+ bytes"):
        mindir.read_weights(cut)
    assert stored_weights(cut, "MINDIR") is None
