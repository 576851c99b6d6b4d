"""Provenance inside the artefact: every MindIR (``user_info``) and ONNX file (``metadata_props``)
amptool writes says where it came from, the file alone (renamed, copied without its manifest)
still says it, ``inspect`` shows it, and a foreign artefact is labelled as such."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import amptool
from amptool.artefact.audit import audit_artefact
from amptool.artefact.provenance import NO_PROVENANCE, read_provenance
from amptool.cli import app
from amptool.documents.provenance import PROVENANCE_KEY
from amptool.errors import UsageError
from amptool.files.fileio import sha256

pytestmark = pytest.mark.slow  # trains or exports real networks

cli = CliRunner()


def _alone(path: str, folder: Path, name: str) -> Path:
    """The artefact's main file copied alone (no manifest, no settings) under a new name."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    shutil.copyfile(path, target)
    return target


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """lenet5 from a checkpoint with conv1 and fc2 kept in fp32, exported by the command."""
    import mindspore as ms

    from amptool.network.models import resolve_model

    out = tmp_path_factory.mktemp("prov")
    ms.set_seed(0)
    ms.save_checkpoint(resolve_model("lenet5").build(), str(out / "lenet5.ckpt"))
    (out / "keep.json").write_text(json.dumps({"level": "O2", "fp32_cells": ["fc2", "conv1"]}))
    res = cli.invoke(app, ["export", "--ckpt", str(out / "lenet5.ckpt"), "--model", "lenet5",
                           "--policy", str(out / "keep.json"), "-f", "mindir,onnx",
                           "--out", str(out / "art"), "--json"])
    assert res.exit_code == 0, res.output
    return out, {(a["format"], a["precision"]): a for a in json.loads(res.output)}


def test_every_artefact_carries_its_provenance_through_a_copy(exports, runs, tmp_path):
    """The Python API's export of a training run that keeps a cell in fp32 (trapmlp's norm):
    the provenance matches the run, the checkpoint and the manifest, and reads the same from
    the file copied alone under another name."""
    run = runs.get("trapmlp")
    for (fmt, precision), result in exports.get("trapmlp").items():
        m = result.manifest
        found = read_provenance(result.path)
        assert found is not None, result.path
        suffix = Path(result.path).suffix
        copy = _alone(result.path, tmp_path / f"{fmt}-{precision}", f"renamed{suffix}")
        assert read_provenance(copy) == found
        assert (found.format, found.precision, found.io_dtype) == (fmt, precision, "fp32")
        assert found.amptool_version == amptool.__version__
        assert found.mindspore_version == m.mindspore_version
        assert found.run is not None and found.run.path == str(run.resolve())
        assert found.run.sha256 == sha256(run / "run.json")
        assert found.checkpoint.sha256 == m.checkpoint.sha256 == sha256(m.checkpoint.path)
        assert found.checkpoint.name == Path(m.checkpoint.path).name
        assert found.policy == m.policy
        assert m.deployment is not None and found.kept_fp32 == m.deployment.kept_fp32
        assert found.kept_paths() == (["norm"] if precision == "fp16" else [])
        assert found.preprocess == m.preprocess
        assert found.model == m.model.spec and found.data == m.data
        # alone, the copy is audited against the policy its provenance declares
        report = audit_artefact(copy)
        assert report.source == "provenance" and report.findings == [], report.findings


def test_inspect_shows_the_provenance_of_a_copy_alone(kept, tmp_path):
    _, by = kept
    for (fmt, precision), art in by.items():
        copy = _alone(art["path"], tmp_path / f"{fmt}-{precision}",
                      f"shipped{Path(art['path']).suffix}")
        res = cli.invoke(app, ["inspect", str(copy)])
        assert res.exit_code == 0, res.output
        assert f"provenance: {precision} (io fp32) lenet5, written by amptool " \
               f"{amptool.__version__}" in res.output
        assert "checkpoint lenet5.ckpt (sha256 " in res.output
        kept_cells = "conv1, fc2" if precision == "fp16" else "none"
        assert f"kept in fp32: {kept_cells}" in res.output
        assert "preprocessing: 1x32x32, (x - " in res.output  # the digits, as trained
        assert "precision audit:" in res.output and "in its provenance: no findings" in res.output
        assert "manifest: none" in res.output
        facts = json.loads(cli.invoke(app, ["inspect", str(copy), "--json"]).output)
        assert facts["provenance"]["kept_fp32"] == (
            [{"path": "conv1", "type": "Conv2d"}, {"path": "fc2", "type": "Dense"}]
            if precision == "fp16" else [])
        assert facts["audit"]["passed"] is True and facts["audit"]["source"] == "provenance"


def test_a_foreign_artefact_is_labelled_and_still_works(tmp_path):
    """A graph MindSpore wrote directly, in MINDIR and ONNX: no provenance (None, labelled),
    inspect and the audit (without a policy) still work."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(8, 4), nn.ReLU())
    x = ms.Tensor(np.ones((1, 8), np.float32))
    ms.export(net, x, file_name=str(tmp_path / "foreign"), file_format="MINDIR")
    ms.onnx.export(net, x, file_name=str(tmp_path / "foreign.onnx"))
    for name in ("foreign.mindir", "foreign.onnx"):
        path = tmp_path / name
        assert read_provenance(path) is None
        res = cli.invoke(app, ["inspect", str(path)])
        assert res.exit_code == 0, res.output
        assert NO_PROVENANCE in res.output and "no policy (none declared" in res.output
        report = audit_artefact(path)
        assert report.policy is None and report.passed, report.findings


def test_a_bad_provenance_is_one_line(kept, tmp_path):
    """A provenance entry that is not JSON, or newer than this amptool reads: one line."""
    import onnx

    _, by = kept
    model = onnx.load(by[("ONNX", "fp16")]["path"])
    entry = next(e for e in model.metadata_props if e.key == PROVENANCE_KEY)
    value = json.loads(entry.value)
    for text, match in (("{not json", "is not JSON"),
                        (json.dumps(dict(value, schema_version=99)), "upgrade amptool"),
                        (json.dumps(dict(value, precision="fp8")), "field 'precision'")):
        entry.value = text
        path = tmp_path / "bad.onnx"
        onnx.save(model, str(path))
        with pytest.raises(UsageError, match=match) as info:
            read_provenance(path)
        assert "\n" not in str(info.value)
        res = cli.invoke(app, ["inspect", str(path)])
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    with pytest.raises(UsageError, match="cannot be read as ONNX"):
        (tmp_path / "junk.onnx").write_bytes(b"\xff" * 64)
        read_provenance(tmp_path / "junk.onnx")
