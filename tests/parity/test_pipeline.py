"""``amptool run``: train -> export -> parity -> summary, healthy and planted-fault."""
from __future__ import annotations

import json
import re
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from amptool.cli import app

pytestmark = pytest.mark.slow  # trains or exports real networks

runner = CliRunner()
SUMMARY_KEYS = {"artefacts", "config", "out", "parity", "passed", "schema_version", "seconds",
                "seconds_by_stage", "train", "warnings"}
"""summary.json's keys, as the dict-built summary wrote them (so the rest below)."""
TRAIN_KEYS = {"best_acc", "device", "loss", "loss_scale", "overflow_steps", "policy", "seconds",
              "steps", "val_acc"}
REFERENCE_ROW = {"accuracy", "deployment", "format", "path", "precision", "size", "size_ratio",
                 "verdict"}
CANDIDATE_ROW = REFERENCE_ROW | {"caveat", "cosine", "drop", "max_abs", "outputs", "warnings"}
OUTPUT_ROW = {"breaches", "cosine", "max_abs_scaled", "name", "passed"}


def test_default_pipeline_passes_and_writes_its_reports(doc_run):
    """The README's quickstart, run once per session."""
    result = doc_run("quickstart")
    out = result.cwd / "runs" / "pipeline"
    for stage in ("== train", "== export", "== parity"):
        assert stage in result.output
    assert "MINDIR  fp16" in result.output
    assert re.search(r"parity PASSED on \d+ samples", result.output)
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["format"], r["precision"]): r for r in summary["artefacts"]}
    assert rows[("MINDIR", "fp32")]["verdict"] == "reference"
    assert rows[("MINDIR", "fp16")]["verdict"] == "PASS"
    assert rows[("MINDIR", "fp16")]["size_ratio"] < 0.51
    assert all(r["accuracy"] is not None for r in rows.values())
    from amptool.artefact import onnx_installed

    assert (("ONNX", "fp32") in rows) == onnx_installed()
    assert json.loads((out / "parity.json").read_text())["passed"]
    assert ET.parse(out / "parity.xml").getroot().get("failures") == "0"
    assert set(summary) == SUMMARY_KEYS and set(summary["train"]) == TRAIN_KEYS
    assert [set(r) for r in summary["artefacts"][:2]] == [REFERENCE_ROW, CANDIDATE_ROW]
    assert set(rows[("MINDIR", "fp16")]["outputs"][0]) == OUTPUT_ROW
    from amptool.documents.summary import PipelineSummary

    assert PipelineSummary.from_dict(summary).to_dict() == summary
    from schemas import assert_fits

    assert_fits(summary, "summary")  # the published schema agrees
    from amptool.pipeline import write_summary

    broken = json.loads(json.dumps(summary))  # a copy, one figure NaN and one infinite
    broken["artefacts"][1].update(cosine=float("nan"), max_abs=float("inf"))
    write_summary(out.parent / "nan-summary.json", PipelineSummary.from_dict(broken))
    text = (out.parent / "nan-summary.json").read_text()

    def refuse(word):
        raise AssertionError(f"summary.json holds the bare {word}, which is not JSON")

    strict = json.loads(text, parse_constant=refuse)
    assert strict["artefacts"][1]["cosine"] == "nan" and strict["artefacts"][1]["max_abs"] == "inf"
    assert_fits(strict, "summary")


def test_pipeline_exits_1_on_the_planted_fp16_overflow(shared):
    """The fp16 MindIR overflows; the fp16 ONNX, computed in fp32 by onnxruntime's CPU
    provider, is labelled as no fp16 evidence and cannot hide that failure (the planted fault
    of docs/guides/parity-ci.md, ONNX at its default ``auto``, run once per session). Without
    --per-layer, the failure is localized by itself: its line names the cell and report.html
    draws the error along the depth."""
    from docruns import DOC_RUNS, cli_run

    result = cli_run(shared, DOC_RUNS["trap"])
    out = "runs/ci-trap"
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("amptool: error:")]
    assert len(errors) == 1 and "parity failed for trapmlp_fp16.mindir: " in errors[0]
    assert "(limit " in errors[0]  # the breaches, as `amptool parity` names them
    assert "culprit: first diverging cell 'norm'" in errors[0]
    assert errors[0].endswith(f"see {out}/parity.json")
    assert "parity FAILED" in result.stdout
    html = (result.cwd / out / "report.html").read_text()
    assert "Per-layer error along the depth" in html and "culprit: norm (born)" in html
    summary = json.loads((result.cwd / out / "summary.json").read_text())
    assert not summary["passed"] and summary["parity"]["culprits"][0]["where"] == "norm"
    rows = {(r["format"], r["precision"]): r for r in summary["artefacts"]}
    assert rows[("MINDIR", "fp16")]["verdict"] == "FAIL" and not rows[("MINDIR", "fp16")]["caveat"]
    from amptool.artefact import onnx_installed

    if onnx_installed():
        onnx = rows[("ONNX", "fp16")]
        assert onnx["verdict"] in ("PASS*", "FAIL*")
        assert "trapmlp_fp16.mindir (FAIL)" in onnx["caveat"]
        from amptool.documents.summary import PipelineSummary
        from amptool.pipeline import PipelineResult, format_summary

        typed = PipelineSummary.from_dict(summary)
        table = format_summary(PipelineResult(typed.passed, typed))
        assert "* ONNX fp16: onnxruntime's CPU provider" in table and "parity FAILED" in table
    else:
        assert list(rows) == [("MINDIR", "fp32"), ("MINDIR", "fp16")]


def test_pipeline_mistakes_fail_before_any_work(tmp_path):
    out = tmp_path / "never"
    for args, message in ((["--onnx", "maybe"], "unknown --onnx 'maybe'"),
                          (["--epochs", "0"], "epochs must be >= 1")):
        result = runner.invoke(app, ["run", "--out", str(out), *args])
        assert result.exit_code == 2, result.output
        assert message in result.output
    assert not out.exists()


def test_pipeline_into_a_finished_run_needs_overwrite(tmp_path):
    """A folder holding a pipeline run is refused before any work; --overwrite names what
    it replaces (the run itself is the fault matrix's and the tests above)."""
    from amptool.documents.events import Overwrite
    from amptool.pipeline import PipelineConfig, claim_out_folder

    out = tmp_path / "done"
    (out / "train").mkdir(parents=True)
    for name in ("train/run.json", "train/last.ckpt", "summary.json"):
        (out / name).write_text("{}\n")
    result = runner.invoke(app, ["run", "--epochs", "1", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert (f"{out} already holds a pipeline run (train/run.json, train/last.ckpt, "
            "summary.json); pass --overwrite to replace it, or another --out") in result.output
    events = []
    claim_out_folder(PipelineConfig(out=str(out), overwrite=True), out, events.append)
    assert events == [Overwrite(str(out), ["train/run.json", "train/last.ckpt", "summary.json"])]
    assert events[0].to_dict() == {"kind": "overwrite", "out": str(out), "unfinished": False,
                                   "replaced": ["train/run.json", "train/last.ckpt",
                                                "summary.json"]}
    assert PipelineConfig(out=str(out), overwrite=True).train_config().overwrite
