"""``amptool diff`` on real parity reports: the docs' quickstart pipeline (simplecnn, three
candidates) and planted-fault pipeline (trapmlp with ``--per-layer``), both run once a
session, and copies of them with figures, checks, kept cells or identities edited.

Through the command line in this process (typer's CliRunner), once as a real process, and
through the Python API."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app

pytestmark = pytest.mark.slow  # reads the reports of two trained and exported pipelines

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schemas"


@pytest.fixture(scope="module")
def quick(doc_run) -> Path:
    """The quickstart pipeline's folder (``amptool run --epochs 1``): parity.json with the
    fp32 ONNX, fp16 MindIR and fp16 ONNX candidates, summary.json beside it."""
    return doc_run("quickstart").cwd / "runs" / "pipeline"


@pytest.fixture(scope="module")
def trap(shared) -> dict:
    """The planted-fault pipeline's parity report (trapmlp, all fp16, ``--per-layer``)."""
    from docruns import DOC_RUNS, cli_run

    run = cli_run(shared, DOC_RUNS["trap"])
    assert run.exit_code == 1, run.output[-2000:]
    return json.loads((run.cwd / "runs" / "ci-trap" / "parity.json").read_text())


def report(folder: Path) -> dict:
    return json.loads((folder / "parity.json").read_text())


def written(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def candidate(doc: dict, fmt: str = "MINDIR", precision: str = "fp16") -> dict:
    return next(c for c in doc["candidates"]
                if (c["format"], c["precision"]) == (fmt, precision))


def run_diff(*args):
    return CliRunner().invoke(app, ["diff", *map(str, args)])


def block_of(stdout: str, name: str) -> str:
    """Candidate ``name``'s part of the table."""
    return stdout.split(f"candidate  {name} ", 1)[1].split("\ncandidate  ", 1)[0]


def rows_of(stdout: str, name: str) -> dict:
    """Figure -> its table line, of candidate ``name``'s block."""
    return {line.split()[1]: line for line in block_of(stdout, name).splitlines()
            if line.startswith("    output0 ")}


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_a_report_against_itself_passes_with_every_figure_unchanged(quick):
    result = run_diff(quick, quick / "parity.json")  # a run folder, and its report
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-1] == "diff: no regression (3 candidates in both reports, 0 figures improved)"
    assert "candidate  simplecnn_fp16.mindir (MINDIR fp16): PASS -> PASS" in lines
    figures = [line.split()[1] for line in lines if line.startswith("    output0 ")]
    assert figures == ["cosine", "p999_abs_scaled", "max_abs_scaled", "top1_agree_clear",
                       "acc_drop_clear", "nonfinite"] * 3
    assert all(line.split()[-1] == "unchanged" or "unchanged [95% CI" in line
               for line in lines if line.startswith("    output0 "))
    summary = run_diff(quick / "summary.json", quick, "-q")  # a run's summary names it too
    assert summary.exit_code == 0 and summary.stdout.startswith("diff: no regression")


def test_an_error_grown_beyond_its_resolution_fails_in_one_line_naming_it(quick, tmp_path):
    new = report(quick)
    metrics = candidate(new)["outputs"][0]["metrics"]
    metrics["p999_abs_scaled"] *= 3  # no limit bounds it on fp16 logits: only the diff sees
    result = run_diff(quick, written(tmp_path, "new.json", new))
    assert result.exit_code == 1, result.output
    line = error_line(result)
    assert line.startswith("amptool: error: diff REGRESSED: simplecnn_fp16.mindir: "
                           "p999_abs_scaled "), line
    assert "worse beyond its noise" in line and "[regression]" in line
    assert rows_of(result.stdout, "simplecnn_fp16.mindir")["p999_abs_scaled"].endswith(
        "REGRESSED")
    assert result.stdout.splitlines()[-1].startswith("diff REGRESSED: simplecnn_fp16.mindir")
    # the budget in the parity config file gives it room
    config = tmp_path / "parity.toml"
    config.write_text("samples = 359\n[regression]\nerror_growth = 2.5\n")
    assert run_diff(quick, tmp_path / "new.json", "--config", config).exit_code == 0


def test_a_change_within_noise_passes_and_an_improvement_is_shown(quick, tmp_path):
    from amptool.stats.sketch import GRID

    new = report(quick)
    cand = candidate(new)
    metrics = cand["outputs"][0]["metrics"]
    metrics["p999_abs_scaled"] *= 1 + GRID.rel_bound / 2  # one bin of the sketch at most
    metrics["acc_drop_clear"] = 1 / 359  # one sample lost: inside the 95 % interval
    metrics["max_abs_scaled"] /= 2
    result = run_diff(quick, written(tmp_path, "new.json", new))
    assert result.exit_code == 0, result.output
    rows = rows_of(result.stdout, "simplecnn_fp16.mindir")
    assert rows["p999_abs_scaled"].endswith("within noise")
    assert "within noise [95% CI" in rows["acc_drop_clear"]
    assert rows["max_abs_scaled"].endswith("improved")
    assert result.stdout.splitlines()[-1].endswith("1 figure improved)")


def test_a_check_that_passed_and_fails_is_the_worst_regression(quick, tmp_path):
    new = report(quick)
    cand = candidate(new)
    output = cand["outputs"][0]
    output["metrics"]["cosine"] = 0.9981
    check = next(c for c in output["checks"] if c["metric"] == "cosine")
    check.update(value=0.9981, passed=False)
    cand["passed"] = output["passed"] = new["passed"] = False
    output["metrics"]["p999_abs_scaled"] *= 3
    result = run_diff(quick, written(tmp_path, "new.json", new))
    assert result.exit_code == 1
    assert error_line(result) == (
        "amptool: error: diff REGRESSED: simplecnn_fp16.mindir: cosine passed, now fails "
        "(0.9981, limit >= 0.999) (and 2 more); see the table above; if the change is meant, "
        "give the budget room in the config file's [regression] table")
    assert "candidate  simplecnn_fp16.mindir (MINDIR fp16): PASS -> FAIL" in result.stdout
    assert "  check output0 cosine: pass -> FAIL (0.9981, limit >= 0.999)" in result.stdout
    for flag, where in (("--json", "see the regressions of the JSON printed; "),
                        ("-q", "see the table amptool diff prints without -q; ")):
        shown = run_diff(quick, tmp_path / "new.json", flag)  # no table above the error
        assert shown.exit_code == 1 and where in error_line(shown), shown.stderr
    budget = tmp_path / "b.json"  # flips not counted, figures given room: passes
    budget.write_text(json.dumps({"regression": {"check_flips": False,
                                                 "error_growth": "off"}}))
    assert run_diff(quick, tmp_path / "new.json", "--config", budget).exit_code == 0


def test_kept_cells_limits_and_missing_candidates_are_shown(quick, tmp_path):
    new = report(quick)
    cand = candidate(new)
    cand["deployment"]["kept_fp32"] = [{"path": "fc", "type": "Dense"}]
    cand["outputs"][0]["thresholds"]["min_cosine"] = 0.99
    new["candidates"] = [c for c in new["candidates"]
                         if (c["format"], c["precision"]) != ("ONNX", "fp16")]
    result = run_diff(quick, written(tmp_path, "new.json", new))
    assert "  kept fp32: now kept: fc" in result.stdout
    assert "  limit output0 min_cosine: 0.999 -> 0.99" in result.stdout
    assert "candidate  simplecnn_fp16.onnx (ONNX fp16): only in BASE (PASS)" in result.stdout
    assert result.exit_code == 1
    assert "simplecnn_fp16.onnx: checked in BASE, missing from NEW" in error_line(result)
    config = tmp_path / "c.yaml"
    config.write_text("regression:\n  missing_candidates: false\n")
    assert run_diff(quick, tmp_path / "new.json", "--config", config).exit_code == 0


def test_candidates_in_other_folders_and_renamed_files_are_matched(quick, tmp_path):
    new = report(quick)
    for cand in new["candidates"]:  # another checkout's folders
        cand["path"] = "/elsewhere/ci/" + Path(cand["path"]).name
    candidate(new)["path"] = "/elsewhere/ci/simplecnn_fp16_r2.mindir"  # renamed: its kind
    result = run_diff(quick, written(tmp_path, "new.json", new), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [(c["name"], c["base_path"] is not None) for c in doc["candidates"]] == [
        ("simplecnn_fp32.onnx", True), ("simplecnn_fp16_r2.mindir", True),
        ("simplecnn_fp16.onnx", True)]


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["reference"].update(model="lenet5"), "reports of different models "
                                                      "(simplecnn, lenet5)"),
    (lambda d: d["inputs"].update(samples=200, description="digits held-out split (200 "
                                                           "samples)"),
     "judged different inputs"),
    (lambda d: d["inputs"].update(description="npz:/data/other.npz held-out split (359 "
                                              "samples)"), "judged different inputs"),
    (lambda d: d.update(schema_version=2), "field 'schema_version' is 2, newer than amptool"),
])
def test_reports_of_another_model_inputs_or_a_newer_schema_are_refused(quick, tmp_path, edit,
                                                                        words):
    new = report(quick)
    edit(new)
    result = run_diff(quick, written(tmp_path, "new.json", new))
    assert result.exit_code == 2, result.output
    assert words in error_line(result)


def test_inputs_named_from_other_folders_are_the_same_inputs(quick, tmp_path):
    base, new = report(quick), report(quick)
    base["inputs"]["description"] = "npz:/ci/job1/release.npz held-out split (359 samples)"
    new["inputs"]["description"] = "npz:release.npz held-out split (359 samples)"
    base["reference"]["model"] = "/ci/job1/models/net.py:build"
    new["reference"]["model"] = "models/net.py:build"
    result = run_diff(written(tmp_path, "b.json", base), written(tmp_path, "n.json", new), "-q")
    assert result.exit_code == 0, result.output


def test_the_per_layer_diff_names_the_cell_whose_error_grew(trap, tmp_path):
    """BASE: the planted-fault report with its culprit fixed (norm kept in fp32, its error
    and every later cell's at fp16 roundoff); NEW: the real report, norm demoted."""
    base = copy.deepcopy(trap)
    fixed = candidate(base)
    fixed["deployment"]["kept_fp32"] = [{"path": "norm", "type": "L2Normalize"}]
    after = False
    for row in fixed["per_layer"]["rows"]:
        after = after or row["path"] == "norm"
        if after:
            row.update(cosine=1 - 5e-8, in_cosine=None if row["in_cosine"] is None
                       else 1 - 5e-8, flagged=False, origin=None)
            row["dtype"] = "float32" if row["path"] == "norm" else row["dtype"]
    fixed["per_layer"].update(first_flagged=None, origin=None)
    result = run_diff(written(tmp_path, "base.json", base), written(tmp_path, "new.json", trap))
    assert result.exit_code == 0, result.output  # the same figures: only the layers moved
    text = block_of(result.stdout, "trapmlp_fp16.mindir")
    assert "  kept fp32: no longer kept: norm" in text
    head = next(line for line in text.splitlines() if line.startswith("  per-layer"))
    assert "grew most: norm;" in head and "first below the limit: none -> norm" in head
    norm = next(line for line in text.splitlines() if line.split()[:1] == ["norm"])
    assert norm.split()[1] == "float32->float16" and norm.endswith("<< grew most")


def test_json_fits_the_published_schema_and_reads_back(quick, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from amptool.documents.diff import DIFF
    from amptool.documents.door import read_document

    new = report(quick)
    candidate(new)["outputs"][0]["metrics"]["cosine"] = "nan"  # NaN as the JSON holds it
    result = run_diff(quick, written(tmp_path, "new.json", new), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    schema = json.loads((SCHEMAS / "diff.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert DIFF.json(read_document(DIFF, result.stdout, "stdout")) == doc
    cosine = next(f for c in doc["candidates"] if c["name"] == "simplecnn_fp16.mindir"
                  for f in c["outputs"][0]["figures"] if f["figure"] == "cosine")
    assert cosine["new"] == "nan" and cosine["status"] == "regressed"
    assert doc["regressions"][0]["what"] == "cosine" and doc["passed"] is False
    broken = copy.deepcopy(doc)
    broken["candidates"][0]["outputs"][0]["figures"][0]["status"] = "worse"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_the_report_page_shows_the_diff(quick, tmp_path):
    new = report(quick)
    candidate(new)["outputs"][0]["metrics"]["max_abs_scaled"] *= 4
    page = tmp_path / "diff.html"
    result = run_diff(quick, written(tmp_path, "new.json", new), "--report", page, "-q")
    assert result.exit_code == 1
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and 'class="verdict fail"' in html
    assert "diff REGRESSED: simplecnn_fp16.mindir: max_abs_scaled" in html
    assert 'id="diff"' in html and "<script" not in html and " src=" not in html


def test_the_python_api_compares_reports_read_or_in_memory(quick, trap):
    import amptool
    from amptool.documents.parity import ParityReport
    from amptool.errors import UsageError
    from amptool.gate.diff import compare_reports

    report_ = amptool.diff(amptool.DiffConfig(str(quick), str(quick / "parity.json")))
    assert isinstance(report_, amptool.DiffReport) and report_.passed
    fp16 = next(c for c in report_.candidates if c.name == "simplecnn_fp16.mindir")
    assert [f.figure for f in fp16.outputs[0].figures][:3] == ["cosine", "p999_abs_scaled",
                                                                "max_abs_scaled"]
    assert type(report_).from_dict(report_.to_dict()) == report_
    worse = ParityReport.from_dict(report(quick))
    lost = copy.deepcopy(report(quick))
    lost["candidates"] = lost["candidates"][:1]
    found = compare_reports(worse, ParityReport.from_dict(lost))
    assert not found.passed and {r.kind for r in found.regressions} == {"missing"}
    with pytest.raises(UsageError, match="different models"):
        compare_reports(worse, ParityReport.from_dict(trap))


def test_diff_as_a_subprocess(quick, tmp_path):
    new = report(quick)
    candidate(new)["outputs"][0]["metrics"]["nonfinite"] = 3
    exe = Path(sys.executable).with_name("amptool")
    done = subprocess.run([str(exe), "diff", str(quick), str(written(tmp_path, "n.json", new)),
                           "-q"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("diff REGRESSED: simplecnn_fp16.mindir: nonfinite 0 -> 3")
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("amptool: error: diff REGRESSED")


def test_a_task_metric_is_judged_by_its_interval_or_exactly(quick, tmp_path):
    def with_task(drop: float, ci=None) -> dict:
        doc = report(quick)
        metrics = {"task_ref": 0.9, "task_cand": 0.9 - drop, "task_drop": drop,
                   **({"task_drop_ci": ci} if ci else {})}
        candidate(doc)["task"] = {"name": "task", "spec": "metrics.py:top5",
                                  "metrics": metrics, "checks": [], "passed": True}
        return doc

    base = written(tmp_path, "base.json", with_task(0.0))
    worse = run_diff(base, written(tmp_path, "worse.json", with_task(0.01)))
    assert worse.exit_code == 1  # no interval: an exact figure, any growth is beyond it
    assert "simplecnn_fp16.mindir task: task_drop 0 -> 0.01" in error_line(worse)
    budget = tmp_path / "b.toml"
    budget.write_text("[regression]\ntask_allowance = 0.02\n")
    assert run_diff(base, tmp_path / "worse.json", "--config", budget).exit_code == 0
    counted = written(tmp_path, "b2.json", with_task(0.0, [-0.02, 0.02]))
    near = written(tmp_path, "n2.json", with_task(0.01, [-0.01, 0.03]))
    assert run_diff(counted, near).exit_code == 0  # inside its interval: noise
