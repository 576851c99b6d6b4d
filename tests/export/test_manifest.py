"""Manifests are right (recomputed sha256), inspect reads the same facts from the files."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.documents.manifest import MANIFEST, read_manifest
from amptool.files.fileio import sha256

pytestmark = pytest.mark.slow  # trains or exports real networks

cli = CliRunner()


@pytest.mark.parametrize("fmt", ["MINDIR", "ONNX"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_manifest_fields(fmt, precision, exports, runs):
    from amptool.network.models import resolve_model

    result = exports.get("resnet")[(fmt, precision)]
    m = MANIFEST.json(read_manifest(result.path))
    assert m == MANIFEST.json(result.manifest)
    run_dir = runs.get("resnet")
    run = json.loads((run_dir / "run.json").read_text())
    assert result.path.endswith(f"resnet_{precision}.{fmt.lower()}")
    assert m["format"] == fmt and m["precision"] == precision and m["io_dtype"] == "fp32"
    assert m["file_size"] == len(open(result.path, "rb").read())
    assert m["sha256"] == sha256(result.path)
    assert m["checkpoint"]["sha256"] == sha256(run_dir / "best.ckpt")
    assert m["checkpoint"]["path"] == str((run_dir / "best.ckpt").resolve())
    assert m["model"] == {"name": "resnet", "spec": "resnet", "input_shape": [1, 28, 28],
                          "num_classes": 10, "args": {}, "input_spec": None,
                          "inputs": [{"name": "x", "shape": [-1, 1, 28, 28], "dtype": "float32"}]}
    assert m["preprocess"] == run["data"]["preprocess"]
    assert m["data"] == run["data"]["source"] and m["val_fraction"] == 0.2
    assert m["source_policy"] == run["policy"]
    assert m["policy"]["level"] == ("O2" if precision == "fp16" else "O0")
    assert m["inputs"] == [{"name": "input0", "shape": [-1, 1, 28, 28], "dtype": "float32"}]
    assert m["outputs"] == [{"name": "output0", "shape": [-1, 10], "dtype": "float32"}]
    assert m["batch"] == {"dynamic": True, "size": None}
    net = resolve_model("resnet").build()
    assert m["params"]["count"] == sum(int(p.size) for p in net.get_parameters())
    assert m["params"]["tensors"] == len(list(net.get_parameters()))
    assert set(m["params"]["dtypes"]) == ({"float32"} if precision == "fp32"
                                          else {"float16", "float32"})
    import mindspore

    assert m["mindspore_version"] == mindspore.__version__ and m["encrypted"] is False
    assert abs(time.time() - time.mktime(time.strptime(m["created"], "%Y-%m-%dT%H:%M:%SZ"))
               + time.timezone) < 3600 * 6


@pytest.mark.parametrize("fmt", ["MINDIR", "ONNX"])
def test_inspect_reads_the_file(fmt, exports, tmp_path):
    from amptool.export.inspect import inspect_artefact

    result = exports.get("transformer")[(fmt, "fp16")]
    facts = inspect_artefact(result.path)
    m = MANIFEST.json(result.manifest)
    assert facts["manifest_matches"] is True
    for key in ("inputs", "outputs", "params", "sha256", "file_size"):
        assert facts[key] == m[key], key
    assert facts["precision"] == "fp16"
    # the same facts without a manifest (a copy elsewhere)
    copy = tmp_path / f"copy{result.path[result.path.rindex('.'):]}"
    copy.write_bytes(open(result.path, "rb").read())
    bare = inspect_artefact(copy)
    assert bare["manifest"] is None and bare["params"] == m["params"]
    res = cli.invoke(app, ["inspect", str(copy)])
    assert res.exit_code == 0, res.output
    assert "float16" in res.output and "manifest: none" in res.output
    res = cli.invoke(app, ["inspect", str(result.path), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["manifest"]["sha256"] == m["sha256"]


def test_inspect_flags_a_tampered_file(exports, tmp_path):
    result = exports.get("lenet5")[("ONNX", "fp32")]
    target = tmp_path / "lenet5_fp32.onnx"
    data = bytearray(open(result.path, "rb").read())
    target.write_bytes(bytes(data))
    (tmp_path / "lenet5_fp32.onnx.json").write_text(json.dumps(result.to_dict()["manifest"]))
    assert cli.invoke(app, ["inspect", str(target)]).exit_code == 0
    data[len(data) // 2] ^= 0xFF  # flip bits inside the stored weights (fc1 is most of the file)
    target.write_bytes(bytes(data))
    res = cli.invoke(app, ["inspect", str(target)])
    assert res.exit_code == 1 and "does not match" in res.output


def test_fixed_batch_fp16_io_and_chunked_runs(runs, references, tmp_path):
    """--batch-size 4 --io-dtype fp16: the runner casts inputs and runs any batch in chunks."""
    from amptool.artefact.runners import load_runner

    res = cli.invoke(app, ["export", "--run", str(runs.get("lenet5")), "--format", "mindir",
                           "-f", "Onnx", "--precision", "fp16", "--batch-size", "4",
                           "--io-dtype", "fp16", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    x, _, ref = references("lenet5")
    for suffix in ("mindir", "onnx"):
        runner = load_runner(tmp_path / f"lenet5_fp16.{suffix}")
        assert runner.inputs[0] == {"name": "input0", "shape": [4, 1, 32, 32], "dtype": "float16"}
        assert runner.outputs[0]["dtype"] == "float16"
        assert runner.manifest.io_dtype == "fp16" and runner.manifest.batch.size == 4
        out = runner.run([x[:10]])[0]  # 10 = 4 + 4 + 2 (padded)
        assert out.shape == (10, 10) and out.dtype == np.float16
        cos = float((out.astype(np.float64) * ref[:10]).sum()
                    / np.linalg.norm(out.astype(np.float64)) / np.linalg.norm(ref[:10]))
        assert cos >= 0.999


def test_a_policy_override_is_the_graphs_and_source_policy_stays_the_runs(runs, tmp_path):
    """export --run R --amp-level O3: the graph is built under O3, the manifest's
    source_policy is still the training run's (O2)."""
    run = runs.get("lenet5")
    res = cli.invoke(app, ["export", "--run", str(run), "--format", "mindir", "--precision",
                           "fp16", "--amp-level", "O3", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    m = MANIFEST.json(read_manifest(next(tmp_path.glob("*_fp16.mindir"))))
    trained = json.loads((run / "run.json").read_text())["policy"]
    assert m["source_policy"] == trained and trained["level"] == "O2"
    assert m["policy"]["level"] == "O3"
