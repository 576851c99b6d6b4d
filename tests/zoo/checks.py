"""Real users' networks (mindcv, ``pretrained=False``) through the flow a user runs:
briefly trained with ``amptool.train``, exported with ``amptool.export`` (MINDIR and ONNX,
fp32 and fp16), gated with ``amptool.parity``.

A verdict must pass, or the report must say why it cannot be trusted: a reference whose
outputs are the same for every input (a network whose BatchNorm statistics are still
their initial values gives that) carries the degenerate-reference finding, checked here
against the stored reference outputs themselves.

The checks of one network; each ``test_<network>.py`` runs them on its network (``NAMES``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from schemas import assert_fits


from .conftest import BATCH, SAMPLES, ZOO

pytestmark = pytest.mark.slow  # trains and exports real networks

PAIRS = {(f, p) for f in ("MINDIR", "ONNX") for p in ("fp32", "fp16")}


def _golden(flow) -> tuple:
    """(inputs fed to the fp32 MindIR, its outputs) as parity stored them."""
    with np.load(flow.golden) as z:
        return z["input_0"], z["output_0"]


def _degenerate(out: np.ndarray) -> bool:
    """NaN/Inf, or (nearly) the same output for every input: nothing a verdict can rest on."""
    out = out.astype(np.float64)
    if not np.isfinite(out).all():
        return True
    return float(out.std(axis=0).max()) < 1e-6 * (1.0 + float(np.abs(out).max()))


def _kinds(candidate) -> set:
    return {f.kind for f in candidate.findings}


def test_training_records_the_zoo_reference(name, zoo_flows):
    flow = zoo_flows(name)
    zoo = ZOO[name]
    train = SAMPLES - round(SAMPLES * 0.2)
    assert flow.summary.steps == train // BATCH
    run = json.loads((flow.root / "train" / "run.json").read_text())
    assert run["model"]["spec"] == zoo.model and run["model"]["args"] == zoo.args
    assert run["model"]["input_shape"] == [3, zoo.size, zoo.size]
    assert run["data"]["train_samples"] == train
    assert run["data"]["preprocess"]["height"] == zoo.size  # 8x8 digits resized by amptool


def test_export_writes_mindir_and_onnx_in_both_precisions(name, zoo_flows):
    artefacts = zoo_flows(name).artefacts
    assert set(artefacts) == PAIRS
    for (fmt, precision), result in artefacts.items():
        path = Path(result.path)
        assert path.is_file() and Path(result.manifest_path).is_file()
        manifest = json.loads(Path(result.manifest_path).read_text())
        assert_fits(manifest, "manifest", result.manifest_path)  # the published schema
        assert (manifest["format"], manifest["precision"]) == (fmt, precision)
        assert manifest["file_size"] == os.path.getsize(path)
        assert manifest["model"]["args"] == ZOO[name].args
    p32 = artefacts[("MINDIR", "fp32")].manifest.params
    p16 = artefacts[("MINDIR", "fp16")].manifest.params
    assert p16.count == p32.count and set(p32.dtypes) == {"float32"}
    # fp16 weights, only normalization layers kept fp32: a little over half the bytes
    assert p32.bytes / 2 <= p16.bytes <= 0.52 * p32.bytes, (p16, p32)


def test_fp16_mindir_passes_or_the_report_says_why(name, zoo_flows):
    flow = zoo_flows(name)
    _, ref = _golden(flow)
    candidate = flow.fp16.candidates[0]
    assert flow.fp16.inputs.samples == len(ref) == SAMPLES - 128
    # the network run again with its kept fp32 cells in fp16 (a runtime ignoring the settings)
    deployment = candidate.deployment
    assert deployment.kept_fp32 and deployment.emulated, deployment.message
    if _degenerate(ref):
        assert "degenerate_reference" in _kinds(candidate), candidate.findings
        return
    assert "degenerate_reference" not in _kinds(candidate), candidate.findings
    assert flow.fp16.passed, [o.checks for o in candidate.outputs]
    assert candidate.fp16_faithful is True
    assert candidate.outputs[0].metrics.cosine >= 0.99


def test_onnx_matches_the_fp32_mindir(name, zoo_flows):
    import onnxruntime as ort

    from ..export.conftest import FP32_REL, scaled_max_abs

    flow = zoo_flows(name)
    x, ref = _golden(flow)
    fp32, fp16 = flow.onnx.candidates
    assert (fp32.precision, fp16.precision) == ("fp32", "fp16")
    assert fp32.passed, [o.checks for o in fp32.outputs]
    assert ("degenerate_reference" in _kinds(fp32)) == _degenerate(ref)
    # onnxruntime's CPU provider computes fp16 nodes in fp32: labelled, not taken as fp16 proof
    assert fp16.fp16_faithful is False and "fp16_emulated" in _kinds(fp16)
    # the same fp32 ONNX file run here directly, against the stored MindIR outputs
    path = flow.artefacts[("ONNX", "fp32")].path
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    batch = session.get_inputs()[0].shape[0]
    chunk = batch if isinstance(batch, int) else len(x)
    outs = [session.run(None, {session.get_inputs()[0].name: x[i:i + chunk]})[0]
            for i in range(0, len(x), chunk)]
    assert scaled_max_abs(np.concatenate(outs), ref) <= FP32_REL


def test_policy_auto_keeps_nothing_of_a_healthy_zoo_network(name):
    """The range pass of ``--policy auto`` (batch normalizations on the batch's statistics,
    the O2 level's fp32 cells kept in the probe) keeps no cell of these networks, over one
    batch of the zoo's training (its cost follows the rows: the probe runs eagerly)."""
    import mindspore as ms

    from amptool.data.dataset import load_model_data
    from amptool.network.models import resolve_model
    from amptool.precision.policy import policy_for
    from amptool.precision.ranges import SAFETY
    from amptool.train.overflow import auto_candidates

    zoo = ZOO[name]
    spec = resolve_model(zoo.model, zoo.args, zoo.input_spec)
    ms.set_seed(0)
    net = spec.build()
    x = load_model_data("digits", spec).train_inputs(np.arange(BATCH))
    found = auto_candidates(net, x, policy_for(None, "O2"), SAFETY)
    assert found == [], [(r.path, r.out_max, r.local_error) for r in found]


def test_diff_of_the_fp16_report_catches_a_planted_regression(name, zoo_flows, tmp_path):
    """``amptool diff`` on the network's fp16 report: against itself every figure is
    unchanged; a copy whose worst error grew fourfold and which dropped a kept fp32 cell fails
    naming the figure, and shows the cell (the command line and the Python API)."""
    from typer.testing import CliRunner

    from amptool.cli import app
    from amptool.documents.parity import ParityReport
    from amptool.files.fileio import jsonable
    from amptool.gate.diff import compare_reports

    report = zoo_flows(name).fp16
    same = compare_reports(report, report)
    assert same.passed and {f.status for c in same.candidates for o in c.outputs
                            for f in o.figures} == {"unchanged"}
    planted = json.loads(json.dumps(jsonable(report.to_dict())))
    cand = planted["candidates"][0]
    metrics = cand["outputs"][0]["metrics"]
    metrics["max_abs_scaled"] = 4 * metrics["max_abs_scaled"] + 1e-3
    dropped = cand["deployment"]["kept_fp32"].pop(0)["path"] or "(network)"
    found = compare_reports(report, ParityReport.from_dict(planted))
    assert not found.passed and found.regressions[0].what == "max_abs_scaled"
    assert found.candidates[0].kept.removed == [dropped]
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(jsonable(report.to_dict())))
    new.write_text(json.dumps(planted))
    result = CliRunner().invoke(app, ["diff", str(base), str(new)])
    assert result.exit_code == 1, result.output
    assert f"  kept fp32: no longer kept: {dropped}" in result.stdout
    assert "max_abs_scaled" in result.stderr and "worse beyond its noise" in result.stderr


def test_precision_audit_finds_nothing_and_catches_a_planted_demotion(name, zoo_flows,
                                                                      tmp_path):
    """Each artefact's audit (the export's own, and the file's against its provenance) has
    no finding; a kept normalization's node demoted in the fp16 MindIR is an error naming it
    and its cell."""
    from amptool.artefact.audit import audit_artefact

    from ..export.mutations import _load, mindir_mutations, write_mutant

    flow = zoo_flows(name)
    for (fmt, precision), result in flow.artefacts.items():
        assert result.audit is not None and result.audit.findings == [], result.audit
        report = audit_artefact(result.path)
        assert report.source == "provenance" and report.findings == [], \
            [f.text for f in report.findings]
    source = Path(flow.artefacts[("MINDIR", "fp16")].path)
    deployment = flow.artefacts[("MINDIR", "fp16")].manifest.deployment
    kept = [c.path for c in (deployment.kept_fp32 if deployment else [])]
    demotion = next(m for m in mindir_mutations(_load(source), kept)
                    if m.label.startswith("demote "))
    report = audit_artefact(write_mutant(source, tmp_path / "mutant", demotion))
    first = report.errors[0]
    assert first.kind == "demoted" and first.node == demotion.label.split()[2], first
    assert first.cell in kept and "(kept in fp32) computes in float16" in first.text


def test_the_ledger_records_the_fp16_check_and_verify_answers_for_those_bytes(
        name, zoo_flows, tmp_path):
    """The fp16 MindIR's check recorded in a ledger and the artefact verified against it
    (the Python API and the command line): those exact bytes pass where the check passed; a
    copy with one byte changed was never tested."""
    from typer.testing import CliRunner

    import amptool
    from amptool.cli import app
    from amptool.ledger.store import record_report

    flow = zoo_flows(name)
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    (rec,) = record_report(ledger, flow.fp16, label="zoo")
    artefact = flow.artefacts[("MINDIR", "fp16")].path
    assert rec.sha256 == flow.fp16.candidates[0].files[0].sha256
    found = amptool.verify(artefact, ledger=ledger)
    expected = "passed" if flow.fp16.passed else "failed"
    assert (found.passed, found.reason) == (flow.fp16.passed, expected), found.line
    result = CliRunner().invoke(app, ["verify", artefact, "--ledger", ledger])
    assert result.exit_code == (0 if flow.fp16.passed else 1), result.output
    copy = tmp_path / Path(artefact).name
    data = bytearray(Path(artefact).read_bytes())
    data[-1] ^= 1
    copy.write_bytes(bytes(data))
    changed = amptool.verify(str(copy), ledger=ledger)
    assert (changed.passed, changed.reason) == (False, "never tested"), changed.line
