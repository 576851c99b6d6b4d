"""report.html: the page ``amptool run``, ``parity`` and ``train`` write (htmlreport), read
from the session's shared pipelines (the quickstart, which passes, and the planted fp16
fault, which fails) and from short runs of its own."""
from __future__ import annotations

import copy
import json
import math
import re

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.report import svgchart as sc
from amptool.report.html import ReportPage, render

runner = CliRunner()
EXTERNAL = ("http://", "https://", "<script", "<link", " src=", "@import", "url(", "//cdn")
"""What a self-contained page never holds: an address, a script or a stylesheet to fetch."""


@pytest.fixture(scope="module")
def passing(doc_run):
    """The quickstart pipeline's folder (parity passes; no --per-layer)."""
    return doc_run("quickstart").cwd / "runs" / "pipeline"


@pytest.fixture(scope="module")
def failing(shared):
    """(the planted-fault pipeline's folder, its output): exit 1, the failing candidates
    localized by themselves (no ``--per-layer``)."""
    from docruns import DOC_RUNS, cli_run

    run = cli_run(shared, DOC_RUNS["trap"])
    assert run.exit_code == 1, run.output[-3000:]
    return run.cwd / "runs" / "ci-trap", run.output


def verdict_of(html: str) -> str:
    """The text of the verdict banner, tags dropped."""
    found = re.search(r'<section id="verdict".*?</section>', html, re.S)
    assert found, html[:2000]
    return re.sub(r"<[^>]+>", " ", found.group(0))


def charts_of(html: str) -> list:
    return re.findall(r'<figure class="chart" data-chart="([^"]*)"', html)


@pytest.mark.slow
def test_a_failing_run_shows_fail_and_the_line_that_explains_it(failing):
    from html import escape

    from amptool.parity.report import ParityReport, failure_fix, failure_line

    folder, output = failing
    html = (folder / "report.html").read_text(encoding="utf-8")
    report = ParityReport.from_dict(json.loads((folder / "parity.json").read_text()))
    banner = verdict_of(html)
    assert "FAIL" in banner and "PASS" not in banner
    assert escape(failure_line(report)) in banner  # the line stderr gives, as it is
    assert escape(failure_fix(report)) in banner
    assert failure_line(report) in output
    assert html.index('id="verdict"') < html.index("<h2>")  # before every section


@pytest.mark.slow
def test_per_layer_charts_come_with_per_layer_data_only(passing, failing):
    folder = failing[0]
    html = (folder / "report.html").read_text(encoding="utf-8")
    report = json.loads((folder / "parity.json").read_text())
    layered = [c for c in report["candidates"] if c.get("per_layer")]
    failed = [c for c in report["candidates"] if not c["passed"]]
    assert layered and [c["path"] for c in layered] == [c["path"] for c in failed]
    assert sum(c.startswith("per-layer ") for c in charts_of(html)) == len(layered)
    assert "culprit: norm (born)" in html  # the first diverging cell marked on its chart
    assert "born here" in html and "inherited" in html
    quick = (passing / "report.html").read_text(encoding="utf-8")
    assert not any(c.startswith("per-layer") for c in charts_of(quick))
    assert "Per-layer" not in quick


@pytest.mark.slow
def test_a_passing_run_shows_its_training_artefacts_and_environment(passing):
    html = (passing / "report.html").read_text(encoding="utf-8")
    report = json.loads((passing / "parity.json").read_text())
    assert "PASS" in verdict_of(html) and "FAIL" not in verdict_of(html)
    assert "parity PASSED on" in verdict_of(html)
    assert {"loss", "loss-scale", "validation"} <= set(charts_of(html))
    assert "No step was skipped" in html  # and so no chart of skipped steps
    for cand in report["candidates"]:
        assert cand["path"].rsplit("/", 1)[-1] in html
    assert "accuracy drop [95% CI]" in html and re.search(r"\[-?[\d.e-]+\.\.[\d.e-]+\]", html)
    for section in ("artefacts", "training", "outputs", "kept", "timings", "environment"):
        assert f'id="{section}"' in html
    import mindspore

    assert mindspore.__version__ in html
    assert "<td>ONEDNN_MAX_CPU_ISA</td><td>AVX2</td>" in html.replace("\n", "")


@pytest.mark.slow
def test_each_artefact_shows_its_provenance_and_precision_audit(passing, tmp_path):
    """The pipeline's artefacts (fp32 reference, fp16 MindIR, ONNX): where each came from
    and no finding; an artefact whose file is gone says it was not read."""
    from amptool.documents.parity import ParityReport
    from amptool.report.artefacts import provenance_section

    html = (passing / "report.html").read_text(encoding="utf-8")
    found = re.search(r'<section id="audit">.*?</section>', html, re.S)
    assert found, html[:2000]
    rows = re.findall(r"<tr>(.*?)</tr>", found.group(0), re.S)[1:]
    report = json.loads((passing / "parity.json").read_text())
    assert len(rows) == 1 + len(report["candidates"])
    for row in rows:
        assert "simplecnn from run " in row and "checkpoint best.ckpt (sha256 " in row, row
        assert "policy O" in row and "no findings (" in row, row
    parsed = ParityReport.from_dict(report)
    folder = tmp_path / "gone"
    parsed = copy.deepcopy(parsed)
    object.__setattr__(parsed.reference, "path", str(folder / "x.mindir"))
    text = provenance_section(parsed, {})
    assert "not read: " in text and "does not exist" in text


@pytest.mark.slow
def test_the_page_refers_to_nothing_outside_itself(passing, failing):
    for folder in (passing, failing[0]):
        html = (folder / "report.html").read_text(encoding="utf-8")
        assert html.startswith("<!DOCTYPE html>")
        assert not [x for x in EXTERNAL if x in html.lower()], folder


@pytest.mark.slow
def test_names_from_the_model_are_escaped(failing):
    """Cell paths, output names and artefact paths are the user's: none reaches the page
    as markup."""
    folder = failing[0]
    report = copy.deepcopy(json.loads((folder / "parity.json").read_text()))
    evil = '<script>alert("x")</script>&<img src=x onerror=alert(1)>'
    for cand in report["candidates"]:
        cand["path"] = f"/tmp/{evil}.mindir"
        for out in cand["outputs"]:
            out["name"] = evil
        for row in (cand.get("per_layer") or {}).get("rows", []):
            row["path"] = evil + row["path"]
        if cand.get("per_layer") and cand["per_layer"]["first_flagged"]:
            cand["per_layer"]["first_flagged"] = evil + cand["per_layer"]["first_flagged"]
    from amptool.parity.report import ParityReport

    html = render(ReportPage("parity", False, f"failed: {evil}", f"fix {evil}",
                             run_folder=str(folder / "train"),
                             parity=ParityReport.from_dict(report)))
    assert "<script" not in html and "<img" not in html
    assert ("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&lt;img src=x "
            "onerror=alert(1)&gt;") in html


def test_long_series_are_thinned_and_keep_their_spikes():
    points = [(i, 1.0 + (100.0 if i == 4321 else 0.0) + math.sin(i)) for i in range(20000)]
    points[9000] = (9000, float("nan"))
    kept = sc.thin(points)
    assert len(kept) <= sc.MAX_POINTS + 2
    assert (4321, points[4321][1]) in kept  # the spike
    assert any(math.isnan(y) for _, y in kept)  # the gap stays a gap
    svg = sc.render(sc.Chart("step", "loss", (sc.Series("loss", tuple(points), "#000"),)))
    drawn = sum(len(p.split()) for p in re.findall(r'points="([^"]*)"', svg))
    assert 100 < drawn <= sc.MAX_POINTS + 2
    assert "<polyline" in svg and ">step<" in svg and ">loss<" in svg


@pytest.mark.slow
def test_train_writes_its_report_in_out(tmp_path, tiny_digits):
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "--epochs", "1", "--data", tiny_digits,
                                 "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "PASS" in verdict_of(html) and "done: simplecnn" in verdict_of(html)
    assert {"loss", "loss-scale", "validation"} <= set(charts_of(html))
    assert "Cells kept in fp32" in html and "level O2" in html


@pytest.mark.slow
def test_a_diverged_training_reports_fail_with_its_skipped_steps(tmp_path, tiny_digits):
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "--epochs", "1", "--data", tiny_digits, "--scale-init",
                                 "1e30", "--max-skipped", "3", "--log-every", "1",
                                 "--out", str(out), "-q"])
    assert result.exit_code == 1, result.output
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "FAIL" in verdict_of(html) and "consecutive overflow steps" in verdict_of(html)
    assert {"loss", "loss-scale", "skipped"} <= set(charts_of(html))


@pytest.mark.slow
def test_parity_writes_beside_json_out_and_report_off_writes_nothing(tmp_path, failing):
    export = failing[0] / "export"
    args = ["parity", str(export / "trapmlp_fp32.mindir"), str(export / "trapmlp_fp16.mindir"),
            "--samples", "64", "-q"]
    result = runner.invoke(app, args + ["--json-out", str(tmp_path / "gate.json")])
    assert result.exit_code == 1, result.output
    html = (tmp_path / "gate.html").read_text(encoding="utf-8")
    assert "FAIL" in verdict_of(html) and "trapmlp_fp16.mindir" in verdict_of(html)
    off = tmp_path / "off"
    off.mkdir()
    result = runner.invoke(app, args + ["--json-out", str(off / "gate.json"), "--report", "off"])
    assert result.exit_code == 1, result.output
    assert sorted(p.name for p in off.iterdir()) == ["gate.json"]
    result = runner.invoke(app, args + ["--report", str(tmp_path / "named.html")])
    assert result.exit_code == 1 and (tmp_path / "named.html").is_file()


@pytest.mark.parametrize("command", [["train"], ["run"], ["parity", "a.mindir", "b.mindir"]])
def test_an_unwritable_report_fails_before_any_work(tmp_path, command):
    out = tmp_path / "out"
    for report, problem in ((tmp_path / "missing" / "r.html", "does not exist"),
                            (tmp_path, "is a folder")):
        result = runner.invoke(app, command + ["--report", str(report)]
                               + (["--out", str(out)] if command[0] != "parity" else []))
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("amptool: error: "), result.output
        assert f"--report {report}" in lines[0] and problem in lines[0], lines[0]
        assert "; " in lines[0]  # and its fix
    assert not out.exists()  # nothing was trained
