"""Networks beyond one image input: token ids, two inputs, two outputs; train, export, parity."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app

pytestmark = pytest.mark.slow  # trains and exports real networks

runner = CliRunner()

TWO_INPUTS = '''
from mindspore import nn, ops


class Tagger(nn.Cell):
    """ids + mask -> (class logits, per-token scores): two inputs, two outputs."""

    def __init__(self, vocab=64, dim=16, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm((dim,))
        self.head = nn.Dense(dim, classes)
        self.token = nn.Dense(dim, 1)

    def construct(self, ids, mask):
        x = self.norm(self.embed(ids)) * ops.expand_dims(mask.astype(ids.dtype).astype(
            self.head.weight.dtype), -1)
        return self.head(x.mean(axis=1)), self.token(x).squeeze(-1)


def build():
    return Tagger()


build.input_signature = "ids:-1x32:int32:0..64,mask:-1x32:int32:0..2"
'''


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


def test_text_sample_trains_exports_and_passes_parity(doc_run):
    """The README's text pipeline, run once per session."""
    out = doc_run("text").cwd / "runs" / "text"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] and summary["train"]["val_acc"] >= 0.9
    assert (out / "export" / "textcls_fp16.onnx").is_file()  # int32 token ids through ONNX
    run = json.loads((out / "train" / "run.json").read_text())
    assert run["model"]["inputs"] == [{"name": "tokens", "shape": [-1, 32], "dtype": "int32",
                                       "range": [0.0, 64.0]}]
    manifest = json.loads((out / "export" / "textcls_fp16.mindir.json").read_text())
    assert manifest["inputs"][0]["dtype"] == "int32" and manifest["precision"] == "fp16"


def test_two_inputs_two_outputs_from_an_npz(tmp_path):
    (tmp_path / "tagger.py").write_text(TWO_INPUTS)
    rng = np.random.RandomState(0)
    ids = rng.randint(5, 64, size=(512, 32)).astype(np.int32)
    y = rng.randint(0, 4, size=512)
    ids[np.arange(512), rng.randint(0, 32, size=512)] = y + 1
    mask = np.ones_like(ids)
    np.savez(tmp_path / "pairs.npz", ids=ids, mask=mask, y=y)
    model = f"{tmp_path}/tagger.py:build"
    _ok(runner.invoke(app, ["train", "--model", model, "--data", f"npz:{tmp_path}/pairs.npz",
                            "--epochs", "2", "--quiet", "--out", str(tmp_path / "run")]))
    _ok(runner.invoke(app, ["export", "--run", str(tmp_path / "run"), "--dynamic-batch",
                            "-f", "MINDIR,ONNX", "--out", str(tmp_path / "export")]))
    manifest = json.loads((tmp_path / "export" / "tagger.py_build_fp16.mindir.json").read_text()
                          if (tmp_path / "export" / "tagger.py_build_fp16.mindir.json").exists()
                          else next((tmp_path / "export").glob("*fp16.mindir.json")).read_text())
    assert [i["dtype"] for i in manifest["inputs"]] == ["int32", "int32"]
    assert len(manifest["outputs"]) == 2
    fp32 = str(next((tmp_path / "export").glob("*fp32.mindir")))
    fp16 = str(next((tmp_path / "export").glob("*fp16.mindir")))
    onnx = [str(next((tmp_path / "export").glob(f"*{p}.onnx"))) for p in ("fp32", "fp16")]
    for data in ("random:3", None):  # the run's own data: the ONNX artefacts too
        args = (["parity", fp32, fp16, "--json"] + (["--data", data] if data else onnx))
        report = json.loads(_ok(runner.invoke(app, args)).output)
        assert report["passed"] and report["inputs"]["labels"] == (data is None)
        assert [len(c["outputs"]) for c in report["candidates"]] == ([2] if data else [2, 2, 2])
        for cand in report["candidates"]:
            logits, tokens = (o["metrics"] for o in cand["outputs"])
            assert "top1_agree" in logits and ("acc_drop" in logits) == (data is None)
            # the per-token scores (32 columns, labels 0..3 would "fit") are no class logits
            assert not {"top1_agree", "acc_drop"} & set(tokens)
    # ready inputs by the model's own names (the MindIR calls them input0, input1)
    report = json.loads(_ok(runner.invoke(app, ["parity", fp32, fp16, "--inputs",
                                                f"{tmp_path}/pairs.npz", "--samples", "64",
                                                "--json"])).output)
    assert report["passed"] and report["inputs"]["labels_from"] == "y"
    assert "acc_drop" in report["candidates"][0]["outputs"][0]["metrics"]


def test_mismatched_signature_is_one_line(tmp_path):
    result = runner.invoke(app, ["train", "--model", "textcls", "--input-spec",
                                 "tokens:-1x32x3:float32", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    line = [text for text in result.output.splitlines() if text.startswith("amptool: error:")]
    assert len(line) == 1 and "does not fit its inputs tokens:-1x32x3:float32" in line[0]
    assert not (tmp_path / "x" / "run.json").exists()


def test_a_dtype_that_does_not_fit_says_what_the_layer_got(tmp_path):
    """MindSpore's kernel error opens with banner lines: the one line names the layer, the
    refusal and the types it got, not a row of dashes."""
    result = runner.invoke(app, ["train", "--model", "textcls", "--input-spec",
                                 "tokens:-1x32:float32", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    line = [text for text in result.output.splitlines() if text.startswith("amptool: error:")]
    assert len(line) == 1 and "layer embed (Embedding) fails: " in line[0], result.output
    assert "Unsupported data type, got input[Float32" in line[0] and "---" not in line[0]


def _pairs(path, count: int = 256, length: int = 32):
    rng = np.random.RandomState(0)
    ids = rng.randint(5, 64, size=(count, length)).astype(np.int32)
    y = rng.randint(0, 4, size=count)
    ids[np.arange(count), rng.randint(0, length, size=count)] = y + 1
    np.savez(path, ids=ids, mask=np.ones_like(ids), y=y)


def test_dynamic_sequence_length_exports_and_runs_at_any_length(tmp_path):
    """A signature with -1 for batch and sequence: the artefacts take any length, match the
    network at each, and inspect lists every input and output."""
    import mindspore as ms

    from amptool.artefact.runners import load_runner
    from amptool.network.checkpoint import build_with_weights, read_checkpoint
    from amptool.network.models import resolve_model

    source = TWO_INPUTS.replace('"ids:-1x32:int32:0..64,mask:-1x32:int32:0..2"',
                                '"ids:-1x-1:int32:0..64,mask:-1x-1:int32:0..2"')
    (tmp_path / "tagger.py").write_text(source)
    _pairs(tmp_path / "pairs.npz")
    model = f"{tmp_path}/tagger.py:build"
    _ok(runner.invoke(app, ["train", "--model", model, "--data", f"npz:{tmp_path}/pairs.npz",
                            "--epochs", "1", "--quiet", "--out", str(tmp_path / "run")]))
    _ok(runner.invoke(app, ["export", "--run", str(tmp_path / "run"), "--dynamic-batch",
                            "-f", "MINDIR", "--out", str(tmp_path / "export")]))
    fp32 = next((tmp_path / "export").glob("*fp32.mindir"))
    fp16 = next((tmp_path / "export").glob("*fp16.mindir"))
    listed = _ok(runner.invoke(app, ["inspect", str(fp16)])).output
    assert "input  input0 (ids): int32 [NxN]" in listed, listed  # names from the manifest
    assert "input  input1 (mask): int32 [NxN]" in listed
    assert "output output0: float32 [Nx4]" in listed and "output output1: float32 [NxN]" in listed
    net = build_with_weights(resolve_model(model), read_checkpoint(tmp_path / "run" / "best.ckpt"),
                             "best.ckpt")
    net.set_train(False)
    ref_runner, half_runner = load_runner(str(fp32)), load_runner(str(fp16))
    rng = np.random.RandomState(1)
    for length in (8, 32, 50):
        ids = rng.randint(0, 64, size=(3, length)).astype(np.int32)
        mask = np.ones_like(ids)
        ref = [o.asnumpy() for o in net(ms.Tensor(ids), ms.Tensor(mask))]
        got, half = ref_runner.run([ids, mask]), half_runner.run([ids, mask])
        for r, g, h in zip(ref, got, half):
            assert g.shape == r.shape == h.shape and r.shape[0] == 3
            scale = max(1.0, float(np.abs(r).max()))
            assert float(np.abs(g - r).max()) / scale <= 1e-5, length  # fp32: rounding only
            assert float(np.abs(h - r).max()) / scale <= 1e-2, length  # fp16: ~3 digits
