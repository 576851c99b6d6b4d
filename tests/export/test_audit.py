"""The static precision audit: no finding on the healthy networks the tests export, through
the command line and the Python API; an export whose graph contradicts its policy (a planted
exporter bug) fails in one line naming the node and the cell and writes nothing."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.artefact.audit import AuditPolicy, audit_artefact
from amptool.cli import app

from .conftest import MODELS
from .mutations import _load, mindir_mutations

pytestmark = pytest.mark.slow  # trains or exports real networks

cli = CliRunner()


@pytest.mark.parametrize("name", MODELS)
def test_the_sample_networks_exports_have_no_finding(name, exports):
    """Every sample network's MINDIR and ONNX, fp32 and fp16 (the policy its run trained
    with: O2's kept batch and layer normalizations, trapmlp's kept norm): the export's own
    audit and one of the file alone (its provenance's policy) find nothing."""
    for (fmt, precision), result in exports.get(name).items():
        assert result.audit is not None and result.audit.findings == [], result.audit
        report = audit_artefact(result.path)
        assert report.source == "provenance" and report.nodes > 0
        assert report.findings == [], [f.text for f in report.findings]


def _demote_conv1(path: Path) -> str:
    """Plant an exporter bug in the written MindIR: its kept cell conv1's Conv2D recorded in
    float16. Returns the node's scope."""
    model = _load(path)
    mutation = next(m for m in mindir_mutations(model, ["conv1", "fc2"])
                    if m.label.startswith("demote Conv2D"))
    mutation.apply(model)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    path.write_bytes(model.SerializeToString())
    return mutation.label.split()[2]


def _edit_after_writing(monkeypatch, fmt: str, edit) -> None:
    """Make the ``fmt`` writer call ``edit(written)`` on each graph file it has written,
    as an exporter bug (or quirk) would leave it."""
    import amptool.export.writer as writer

    real = writer.format_module

    class Edited:
        def __init__(self, module):
            self.module = module

        def __getattr__(self, name):
            return getattr(self.module, name)

        def write(self, *args, **kwargs):
            written, facts = self.module.write(*args, **kwargs)
            edit(written)
            return written, facts

    monkeypatch.setattr(writer, "format_module",
                        lambda name: Edited(real(name)) if name == fmt else real(name))


@pytest.fixture
def buggy_exporter(monkeypatch):
    """The MINDIR writer, with a bug that demotes a kept cell's node after writing."""
    planted: list = []
    _edit_after_writing(monkeypatch, "MINDIR", lambda written: planted.append(
        _demote_conv1(written)))
    return planted


def _cast_again(written: Path) -> None:
    """A Cast to float16 of the float16 tensor the last node reads, inserted before it."""
    import onnx

    model = onnx.load(str(written))
    last = model.graph.node[-1]
    fed = last.input[0]
    cast = onnx.helper.make_node("Cast", [fed], [fed + "_again"], name="Cast_again",
                                 to=onnx.TensorProto.FLOAT16)
    last.input[0] = fed + "_again"
    model.graph.node.insert(len(model.graph.node) - 1, cast)
    os.chmod(written, stat.S_IRUSR | stat.S_IWUSR)
    onnx.save(model, str(written))


@pytest.fixture
def noop_cast_exporter(monkeypatch):
    """The ONNX writer, with a harmless quirk: a Cast that does nothing (no contradiction of
    the policy, one note)."""
    _edit_after_writing(monkeypatch, "ONNX", _cast_again)


@pytest.fixture(scope="module")
def lenet_ckpt(tmp_path_factory):
    import mindspore as ms

    from amptool.network.models import resolve_model

    folder = tmp_path_factory.mktemp("audit")
    ms.set_seed(0)
    ms.save_checkpoint(resolve_model("lenet5").build(), str(folder / "lenet5.ckpt"))
    (folder / "keep.json").write_text(json.dumps({"level": "O2", "fp32_cells": ["fc2", "conv1"]}))
    return folder


def _export(folder: Path, out: Path, *extra: str):
    return cli.invoke(app, ["export", "--ckpt", str(folder / "lenet5.ckpt"), "--model", "lenet5",
                            "--data", "none", "--policy", str(folder / "keep.json"),
                            "--precision", "fp16", "-f", "mindir,onnx", "--out", str(out),
                            *extra])


def test_an_export_contradicting_its_policy_fails_and_writes_nothing(lenet_ckpt, tmp_path,
                                                                     buggy_exporter):
    out = tmp_path / "out"
    res = _export(lenet_ckpt, out)
    assert res.exit_code == 1, res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output, res.output
    node = buggy_exporter[0]
    assert (f"the exported MINDIR fp16 graph lenet5_fp16.mindir contradicts its policy: node "
            f"{node} (Conv2D) of cell conv1 (kept in fp32) computes in float16") in res.output
    assert "nothing was written" in res.output and "--no-audit" in res.output
    assert not out.exists() or not [p for p in out.iterdir() if p.name != ".amptool.lock"]


def test_no_audit_writes_it_and_inspect_then_names_the_node(lenet_ckpt, tmp_path,
                                                            buggy_exporter):
    out = tmp_path / "out"
    res = _export(lenet_ckpt, out, "--no-audit", "--json")
    assert res.exit_code == 0, res.output
    assert all(a["audit"] is None for a in json.loads(res.output))
    path = out / "lenet5_fp16.mindir"
    res = cli.invoke(app, ["inspect", str(path)])
    assert res.exit_code == 1, res.output
    assert f"ERROR: node {buggy_exporter[0]} (Conv2D) of cell conv1 (kept in fp32) computes " \
           "in float16" in res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(f"amptool: error: {path}: its graph contradicts its policy: node ")


def test_the_python_api_audits_against_a_given_policy(lenet_ckpt, tmp_path):
    """``audit_artefact`` with the policy its caller states: the healthy graph against the
    right one passes; against a policy keeping nothing, conv1's and fc2's nodes and weights
    are promotions."""
    out = tmp_path / "out"
    assert _export(lenet_ckpt, out).exit_code == 0
    for name in ("lenet5_fp16.mindir", "lenet5_fp16.onnx"):
        path = out / name
        assert audit_artefact(path, policy=AuditPolicy("fp16", "fp32", ("conv1", "fc2"))).passed
        report = audit_artefact(path, policy=AuditPolicy("fp16", "fp32", ()))
        assert report.source == "given" and not report.passed
        cells = {f.cell for f in report.errors}
        assert cells == {"conv1", "fc2"}, [f.text for f in report.errors]
        kinds = {f.kind for f in report.errors}
        assert {"weight"} <= kinds and kinds <= {"weight", "promoted", "flow"}
        assert report.to_dict()["errors"] == len(report.errors)


def test_an_export_with_notes_only_is_written_and_says_so(lenet_ckpt, tmp_path,
                                                          noop_cast_exporter):
    out = tmp_path / "out"
    res = cli.invoke(app, ["export", "--ckpt", str(lenet_ckpt / "lenet5.ckpt"), "--model",
                           "lenet5", "--data", "none", "--precision", "fp16", "-f", "onnx",
                           "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert ("  precision audit: 1 note(s), the first: Cast Cast_again casts float16 to "
            "float16: it does nothing (amptool inspect lists them)") in res.output, res.output
    from amptool.export.api import ExportConfig, export

    again = export(ExportConfig(ckpt=str(lenet_ckpt / "lenet5.ckpt"), model="lenet5",
                                data="none", precision="fp16", formats=("ONNX",),
                                out=str(tmp_path / "api")))
    audit = again[0].audit
    assert audit is not None and audit.passed and [f.kind for f in audit.findings] == [
        "cast_noop"]
    assert again[0].to_dict()["audit"]["findings"][0]["kind"] == "cast_noop"
