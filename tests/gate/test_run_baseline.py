"""``amptool run --baseline``: the run's parity report compared with an earlier run's, as
``amptool diff`` compares them, on the bundled pipeline.

The quickstart pipeline (``amptool run --epochs 1``) is main's run; docs/get-started.md's next
run held to it (``DOC_RUNS["baseline"]``, run once a session) passes. One more run of the same
settings, held to the quickstart's report edited to have much better figures, is a planted
regression: it fails in one line naming the worst, its report.html shows it. The planted-fault
pipeline (trapmlp, parity failing) shows how a run that fails parity and regresses says so.
Reports of another model are refused. (Baselines refused before training:
test_run_baseline_refusals.py.)"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app

pytestmark = pytest.mark.slow  # trains one pipeline and reads three shared ones

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schemas"
FP16 = "simplecnn_fp16.mindir"


@pytest.fixture(scope="module")
def quick(doc_run) -> Path:
    """main's run: the quickstart pipeline's folder."""
    return doc_run("quickstart").cwd / "runs" / "pipeline"


@pytest.fixture(scope="module")
def held(doc_run):
    """docs/get-started.md's next run, held to the quickstart's (``--baseline runs/pipeline``)."""
    return doc_run("baseline")


def fp16_of(doc: dict) -> dict:
    return next(c for c in doc["candidates"] if (c["format"], c["precision"]) == ("MINDIR", "fp16"))


@pytest.fixture(scope="module")
def regressed(quick, tmp_path_factory) -> dict:
    """The one extra run: the quickstart's settings, held to the quickstart's report with its
    fp16 MindIR's worst scaled error 100 times smaller and its p999 10 times smaller, under a
    budget (the run's config file) that lets an error grow 20-fold: p999 stays within it."""
    folder = tmp_path_factory.mktemp("regressed")
    better = json.loads((quick / "parity.json").read_text())
    metrics = fp16_of(better)["outputs"][0]["metrics"]
    metrics["max_abs_scaled"] /= 100
    metrics["p999_abs_scaled"] /= 10
    base = folder / "main-parity.json"
    base.write_text(json.dumps(better))
    config = folder / "run.toml"
    config.write_text("epochs = 1\n[regression]\nerror_growth = 20\n")
    out = folder / "run"
    result = CliRunner().invoke(app, ["run", "--config", str(config), "--out", str(out),
                                      "--baseline", str(base)])
    return {"result": result, "out": out, "base": base, "better": better}


def one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def rows_of(stdout: str, name: str) -> dict:
    """Figure -> its line in candidate ``name``'s part of the diff's table."""
    block = stdout.split(f"candidate  {name} ", 1)[1].split("\ncandidate  ", 1)[0]
    return {line.split()[1]: line for line in block.splitlines()
            if line.startswith("    output0 ")}


def fits_diff_schema(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads((SCHEMAS / "diff.schema.json").read_text()))


def test_a_run_held_to_main_s_passes_with_the_diff_shown(held):
    assert held.exit_code == 0, held.output[-3000:]
    lines = held.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("parity PASSED on 359"))
    assert lines[at + 1:] == [
        "diff: no regression (3 candidates in both reports, 0 figures improved)"]  # --quiet
    out = held.cwd / "runs" / "next"
    doc = json.loads((out / "diff.json").read_text())
    fits_diff_schema(doc)
    from amptool.documents.diff import DIFF
    from amptool.documents.door import read_document

    diff = read_document(DIFF, (out / "diff.json").read_text(), "diff.json")
    assert diff.passed and diff.base.path == "runs/pipeline/parity.json"
    assert diff.new.path == "runs/next/parity.json"
    statuses = {f.status for c in diff.candidates for o in c.outputs for f in o.figures}
    assert statuses <= {"unchanged", "within noise"}  # the same settings, the same network
    html = (out / "report.html").read_text()
    assert 'class="verdict pass"' in html and 'id="diff"' in html
    assert ("; diff: no regression (3 candidates in both reports, 0 figures improved)</p>"
            in html)  # the banner's line: parity's, then the diff's
    section = html.split('<section id="diff">', 1)[1].split("</section>", 1)[0]
    assert '<span class="badge pass">no regression</span>' in section
    assert "runs/pipeline/parity.json" in section and FP16 in section


def test_a_planted_regression_fails_in_one_line_naming_the_worst(regressed):
    result, out = regressed["result"], regressed["out"]
    assert result.exit_code == 1, result.output[-3000:]
    line = one_line(result)
    assert re.fullmatch(
        rf"amptool: error: diff REGRESSED: {re.escape(FP16)}: max_abs_scaled \S+ -> \S+, worse "
        rf"beyond its noise \(1e-05\); see {re.escape(str(out / 'diff.json'))}; if the change "
        r"is meant, give the budget room in the config file's \[regression\] table", line), line
    assert re.search(r"parity PASSED on 359 samples .* -> ", result.stdout)  # parity itself
    rows = rows_of(result.stdout, FP16)  # the table under the summary
    assert rows["max_abs_scaled"].endswith("REGRESSED")
    assert rows["p999_abs_scaled"].endswith("within noise")  # grew 10-fold, the budget 20
    assert result.stdout.splitlines()[-1] == line[len("amptool: error: "):].split("; see")[0]
    doc = json.loads((out / "diff.json").read_text())
    fits_diff_schema(doc)
    assert doc["passed"] is False and doc["budget"]["error_growth"] == 20
    assert [(r["candidate"], r["what"]) for r in doc["regressions"]] == [(FP16, "max_abs_scaled")]
    assert doc["base"]["path"] == str(regressed["base"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] is True  # summary.json keeps parity's verdict


def test_its_report_html_shows_the_diff_section_and_its_verdict(regressed):
    html = (regressed["out"] / "report.html").read_text()
    banner = html.split('<section id="verdict"', 1)[1].split("</section>", 1)[0]
    assert 'class="verdict fail"' in banner and "diff REGRESSED: " in banner
    assert f"{FP16}: max_abs_scaled" in banner and "[regression]" in banner  # its fix
    contents = html.split('<nav class="contents">', 1)[1].split("</nav>", 1)[0]
    assert '<a href="#diff">Diff against the base report</a>' in contents
    section = html.split('<section id="diff">', 1)[1].split("</section>", 1)[0]
    assert '<span class="badge fail">REGRESSED (1)</span> diff REGRESSED: ' in section
    assert f"<td>figure</td><td>{FP16}</td>" in section  # the regressions' table
    assert section.count('<span class="badge fail">regressed</span>') == 1
    assert '<span class="badge info">within noise</span>' in section
    assert html.index('id="artefacts"') < html.index('id="diff"') < html.index('id="training"')


def test_the_diff_section_is_the_one_the_diff_page_shows(regressed):
    from amptool.documents.diff import DiffReport
    from amptool.report.diff import diff_section, render_diff

    diff = DiffReport.from_dict(json.loads((regressed["out"] / "diff.json").read_text()))
    section = diff_section(diff)
    assert section in render_diff(diff)
    assert section in (regressed["out"] / "report.html").read_text()


def test_a_baseline_of_another_model_is_refused_with_the_run_s_reports_kept(held, shared,
                                                                           tmp_path):
    """Refused after parity (exit 2 through ``BaselineRefused``, the run's result on it),
    with a diff.json an earlier run left removed."""
    from docruns import DOC_RUNS, cli_run

    from amptool.documents.parity import ParityReport
    from amptool.errors import UsageError
    from amptool.pipeline import BaselineRefused, PipelineConfig
    from amptool.pipelinediff import Baseline, compare_with_baseline

    trap = cli_run(shared, DOC_RUNS["trap"]).cwd / "runs" / "ci-trap" / "parity.json"
    other = Baseline(ParityReport.from_dict(json.loads(trap.read_text())), str(trap))
    report = ParityReport.from_dict(json.loads(
        (held.cwd / "runs" / "next" / "parity.json").read_text()))
    (tmp_path / "diff.json").write_text("{}")
    with pytest.raises(BaselineRefused) as err:
        compare_with_baseline(other, report, PipelineConfig(out=str(tmp_path)), tmp_path)
    assert isinstance(err.value, UsageError) and err.value.exit_code == 2
    assert "are reports of different models (trapmlp, simplecnn)" in str(err.value)
    assert str(err.value).endswith("give --baseline a report of this run's model on the same "
                                   "inputs (the same --model, --data and --samples)")
    assert not (tmp_path / "diff.json").exists()


def test_a_run_failing_parity_and_regressing_names_parity_first(shared, tmp_path):
    """The planted-fault pipeline fails parity; held to a report of it with a figure 100
    times better it regresses too: exit 1, parity's failure first in the line and the page."""
    from docruns import DOC_RUNS, cli_run

    from amptool.documents.parity import ParityReport
    from amptool.documents.summary import PipelineSummary
    from amptool.errors import CheckFailed
    from amptool.gate.diff import compare_reports
    from amptool.pipeline import PipelineConfig, PipelineResult, raise_if_failed, write_html

    folder = cli_run(shared, DOC_RUNS["trap"]).cwd / "runs" / "ci-trap"
    doc = json.loads((folder / "parity.json").read_text())
    better = copy.deepcopy(doc)
    fp16 = next(c for c in better["candidates"] if c["format"] == "MINDIR")
    fp16["outputs"][0]["metrics"]["max_abs_scaled"] /= 100
    report = ParityReport.from_dict(doc)
    diff = compare_reports(ParityReport.from_dict(better), report)
    assert not report.passed and not diff.passed
    cfg = PipelineConfig(out="runs/ci-trap")
    result = PipelineResult(report.passed, PipelineSummary.from_dict(
        json.loads((folder / "summary.json").read_text())), report, diff)
    with pytest.raises(CheckFailed) as err:
        raise_if_failed(result, cfg)
    text = str(err.value)
    assert err.value.exit_code == 1 and text.startswith("parity failed for trapmlp_fp16.mindir")
    assert "; diff REGRESSED: trapmlp_fp16.mindir" in text
    assert text.index("parity failed") < text.index("diff REGRESSED")
    assert text.endswith("see runs/ci-trap/parity.json and runs/ci-trap/diff.json")
    write_html(tmp_path / "report.html", result, cfg)
    banner = (tmp_path / "report.html").read_text().split('id="verdict"', 1)[1][:3000]
    assert "parity failed for trapmlp_fp16.mindir" in banner and "diff REGRESSED" in banner
