"""Deployment settings: the MindSpore Lite config and ATC option line written beside an
artefact that keeps cells in fp32, with the artefact (all or nothing), listed in the
manifest, shown and checked by inspect; none for an artefact that keeps nothing.

What is tested here is the files and their bookkeeping; no Ascend runtime reads them on
this host (parity's emulation shows what ignoring them costs: tests/parity/test_settings.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.documents.door import to_json
from amptool.export.deploy import ACL_MODE, LITE_MODE, NONE_FP16, NONE_FP32, settings_paths
from amptool.files.fileio import sha256

from .user_models import save_init_checkpoint, triu_net

pytestmark = pytest.mark.slow  # exports real networks

cli = CliRunner()
HERE = Path(__file__).parent
LITE_TEXT = f"[ascend_context]\nprecision_mode={LITE_MODE}\n"
ATC_TEXT = f"--precision_mode={ACL_MODE}\n"


def _settings(path) -> dict:
    return {kind: p for kind, p in settings_paths(path).items()}


@pytest.mark.parametrize("fmt", ["MINDIR", "ONNX"])
def test_kept_cell_gets_settings_beside_the_artefact(fmt, exports):
    """trapmlp's sample run keeps its fp16-unsafe cell 'norm' in fp32 (tests/conftest.py)."""
    result = exports.get("trapmlp")[(fmt, "fp16")]
    section = to_json(result.manifest.deployment)
    assert section["needed"] is True
    assert section["kept_fp32"] == [{"path": "norm", "type": "L2Normalize"}]
    assert section["precision_mode"] == {"mindspore_lite": LITE_MODE, "acl": ACL_MODE}
    assert "enforce_fp16" in section["why"] and "force_fp16" in section["why"]
    files = _settings(result.path)
    assert files["mindspore_lite_config"].read_text() == LITE_TEXT
    assert files["atc_options"].read_text() == ATC_TEXT
    listed = {f["kind"]: f for f in section["files"]}
    for kind, path in files.items():
        assert listed[kind]["name"] == path.name and listed[kind]["sha256"] == sha256(path)
    assert json.loads(Path(result.manifest_path).read_text())["deployment"] == section
    fp32 = exports.get("trapmlp")[(fmt, "fp32")]
    assert to_json(fp32.manifest.deployment) == {"needed": False, "kept_fp32": [],
                                           "precision_mode": None, "files": [], "why": NONE_FP32}
    assert not any(p.exists() for p in _settings(fp32.path).values())


def test_o2_batch_norms_are_listed(exports):
    section = to_json(exports.get("resnet")[("MINDIR", "fp16")].manifest.deployment)
    assert section["needed"] and all(c["type"] == "BatchNorm2d" for c in section["kept_fp32"])
    assert "layer1.bn1" in [c["path"] for c in section["kept_fp32"]]


def test_nothing_kept_needs_no_settings(exports):
    for fmt in ("MINDIR", "ONNX"):
        result = exports.get("simplecnn")[(fmt, "fp16")]
        assert result.manifest.deployment.needed is False
        assert result.manifest.deployment.why == NONE_FP16
        assert not any(p.exists() for p in _settings(result.path).values())


def test_inspect_shows_the_settings_and_fails_when_they_are_missing_or_changed(exports,
                                                                             tmp_path):
    src = Path(exports.get("trapmlp")[("MINDIR", "fp16")].path)
    for name in (src.name, src.name + ".json", src.name + ".lite.ini", src.name + ".atc.txt"):
        shutil.copyfile(src.with_name(name), tmp_path / name)
    art = tmp_path / src.name
    res = cli.invoke(app, ["inspect", str(art)])
    assert res.exit_code == 0, res.output
    assert (f"  deployment settings: {art.name}.lite.ini, {art.name}.atc.txt (Lite "
            f"precision_mode={LITE_MODE}, ATC --precision_mode={ACL_MODE}) keep norm "
            "(L2Normalize) in fp32") in res.output.splitlines()
    facts = json.loads(cli.invoke(app, ["inspect", str(art), "--json"]).output)
    assert all(f["present"] and f["matches"] for f in facts["deployment"]["files"])
    (tmp_path / (art.name + ".lite.ini")).write_text("[ascend_context]\n"
                                                     "precision_mode=enforce_fp16\n")
    (tmp_path / (art.name + ".atc.txt")).unlink()
    res = cli.invoke(app, ["inspect", str(art)])
    assert res.exit_code == 1
    error = [line for line in res.output.splitlines() if line.startswith("amptool: error:")]
    assert error == [f"amptool: error: the deployment settings beside {art} are missing or "
                     f"changed ({art.name}.lite.ini, {art.name}.atc.txt): a runtime without "
                     "them may compute the kept fp32 cells in fp16; export the artefact again"]
    assert "Traceback" not in res.output


def test_settings_commit_with_the_artefacts_and_go_when_nothing_is_kept(tmp_path):
    """Written and listed by the command; a failure later in the same export leaves none;
    an existing settings file needs --force; a re-export that keeps nothing removes them."""
    ckpt = save_init_checkpoint(triu_net, tmp_path / "triu.ckpt")
    policy = tmp_path / "keep.json"
    policy.write_text(json.dumps({"level": "O2", "fp32_cells": ["fc"]}))
    model = f"{HERE / 'user_models.py'}:triu_net"
    base = ["export", "--ckpt", str(ckpt), "--model", model, "--data", "none",
            "--policy", str(policy), "--precision", "fp16"]
    out = tmp_path / "o"
    res = cli.invoke(app, base + ["-f", "MINDIR,ONNX", "--out", str(out)])
    assert res.exit_code == 2 and "cannot convert operator Triu" in res.output
    assert not out.exists() or not list(out.rglob("*.mindir*")), list(out.rglob("*"))
    res = cli.invoke(app, base + ["--out", str(out)])
    assert res.exit_code == 0, res.output
    art = out / "triu_net_fp16.mindir"
    assert (f"  deployment settings: {art.name}.lite.ini, {art.name}.atc.txt (Lite "
            f"precision_mode={LITE_MODE}, ATC --precision_mode={ACL_MODE}) keep fc (Dense) "
            "in fp32") in res.output.splitlines()
    files = _settings(art)
    art.unlink()
    Path(str(art) + ".json").unlink()
    res = cli.invoke(app, base + ["--out", str(out)])  # only the settings are left: refused
    assert res.exit_code == 2 and "already exist" in res.output and "--force" in res.output
    res = cli.invoke(app, base[:-4] + ["--amp-level", "O3", "--precision", "fp16", "--out",
                                       str(out), "--force"])
    assert res.exit_code == 0, res.output
    assert not any(p.exists() for p in files.values())
    assert "deployment settings" not in res.output
    manifest = json.loads(Path(str(art) + ".json").read_text())
    assert manifest["deployment"]["needed"] is False
