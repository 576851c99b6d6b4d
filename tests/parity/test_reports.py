"""Reports (table, JSON, JUnit, plot), golden outputs, given inputs and thresholds."""
from __future__ import annotations

import json
import sys
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from .conftest import error_line as _error_line
from .conftest import parity_cli as _parity


@pytest.mark.slow
def test_table_json_and_junit_of_a_failure(simplecnn, corrupted_fp16, tmp_path):
    js, xml = tmp_path / "r.json", tmp_path / "r.xml"
    result = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], corrupted_fp16,
                     "--samples", 48, "--json-out", js, "--junit", xml)
    assert result.exit_code == 1
    out = result.output
    assert "metric" in out and "threshold" in out and "FAIL" in out and "pass" in out
    assert ">= 0.999" in out and "nonfinite" in out and "rel_l2" in out
    report = json.loads(js.read_text())
    assert [c["passed"] for c in report["candidates"]] == [True, False]
    metrics = report["candidates"][0]["outputs"][0]["metrics"]
    assert {"max_abs", "max_rel", "mean_abs", "rmse", "cosine", "rel_l2", "outside_frac",
            "nonfinite", "top1_agree", "ref_acc", "cand_acc", "acc_drop"} <= set(metrics)
    root = ET.parse(xml).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 2 and int(root.get("failures")) >= 1
    assert suites[0].get("failures") == "0" and int(suites[1].get("failures")) >= 1
    failed = [c for c in suites[1].findall("testcase") if c.find("failure") is not None]
    assert any(c.get("name").endswith(".cosine") for c in failed)


REPORT_KEYS = {"candidates", "device", "golden_saved", "inputs", "passed", "reference",
               "schema_version", "seconds"}
"""The parity report's keys as the dict-built report wrote them (so the sets below)."""
CANDIDATE_KEYS = {"caveat", "culprit", "deployment", "files", "findings", "format",
                  "fp16_faithful", "kind", "outputs", "passed", "path", "per_layer", "precision",
                  "task", "thresholds", "weights"}
OUTPUT_KEYS = {"checks", "metrics", "name", "passed", "thresholds"}
LOGITS_METRICS = {"acc_drop", "acc_drop_ci", "acc_drop_clear", "acc_drop_clear_ci", "cand_acc",
                  "cosine", "counted", "max_abs", "max_abs_scaled", "max_rel", "mean_abs",
                  "near_tie_flips", "nonfinite", "outside_frac", "p999_abs_scaled",
                  "ref_absmax", "ref_acc", "rel_l2", "rmse", "tie_tol", "top1_agree",
                  "top1_agree_clear", "top1_agree_clear_ci"}


@pytest.mark.slow
def test_the_typed_report_reads_back_from_its_json_exactly(simplecnn, corrupted_fp16):
    """The report, typed from each candidate's first figures on (``finish_candidate``), is
    the same report once written and read back (every key, None and NaN included), its
    sections typed as they were made; a key renamed on the way is refused."""
    from amptool.documents.layers import LayerReport, WeightsCheck
    from amptool.documents.parity import Culprit, Finding, OutputResult
    from amptool.files.fileio import jsonable
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig
    from amptool.parity.report import ParityReport

    report = parity(ParityConfig(reference=simplecnn["mindir_fp32"], samples=32,
                                 candidates=(simplecnn["mindir_fp16"], corrupted_fp16),
                                 per_layer=True, layer_samples=4))
    def written(typed) -> dict:  # as parity.json holds it: NaN as "nan"
        return json.loads(json.dumps(jsonable(typed.to_dict())))

    raw = written(report)
    assert written(ParityReport.from_dict(raw)) == raw
    assert set(raw) == REPORT_KEYS and all(set(c) == CANDIDATE_KEYS for c in raw["candidates"])
    assert set(raw["candidates"][0]["outputs"][0]) == OUTPUT_KEYS
    assert set(raw["candidates"][0]["outputs"][0]["metrics"]) == LOGITS_METRICS
    corrupted = report.candidates[1]
    assert isinstance(corrupted.culprit, Culprit) and corrupted.culprit.kind == "weights"
    assert not report.passed and isinstance(corrupted.outputs[0], OutputResult)
    assert isinstance(corrupted.per_layer, LayerReport)
    assert isinstance(corrupted.weights, WeightsCheck) and corrupted.weights.mismatched
    assert all(isinstance(f, Finding) for c in report.candidates for f in c.findings)
    from schemas import assert_fits

    from amptool.artefact.files import file_facts

    # the bytes each verdict is about: every file of the candidate as it was checked
    assert [[f.sha256 for f in c.files] for c in report.candidates] == [
        [f["sha256"] for f in file_facts(c.path)] for c in report.candidates]

    assert_fits(raw, "parity-report")  # the published schema agrees
    metrics = raw["candidates"][0]["outputs"][0]["metrics"]
    metrics["cosine_sim"] = metrics.pop("cosine")
    with pytest.raises(ValueError, match="cosine_sim' is not a key"):
        ParityReport.from_dict(raw)


@pytest.mark.slow
def test_plot_of_the_per_layer_errors(trap, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "layers.png"
    result = _parity(trap["mindir_fp32"], trap["mindir_fp16"], "--samples", 32,
                     "--layer-samples", 4, "--plot", png)
    assert result.exit_code == 1  # --plot implies --per-layer, and the trap fails
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "first below threshold (born)" in result.output


@pytest.mark.slow
def test_plot_without_matplotlib_is_a_clear_error(simplecnn, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "x.png"
    result = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--plot", png)
    assert result.exit_code == 2
    assert "--plot needs matplotlib" in _error_line(result) and not png.exists()


@pytest.mark.slow
def test_the_last_line_says_where_the_result_is(trap, tmp_path):
    """Without a report file it says how to keep one; with them it names each, and a
    failure's line points at the JSON report."""
    args = [trap["mindir_fp32"], trap["mindir_fp16"], "--samples", 32, "--no-localize"]
    bare = _parity(*args)
    assert bare.exit_code == 1
    assert bare.stdout.splitlines()[-1] == (
        "report: none written (--json-out FILE.json writes it, with FILE.html beside it; "
        "--junit FILE.xml for CI)")
    kept = _parity(*args, "--json-out", tmp_path / "p.json", "--junit", tmp_path / "p.xml")
    assert kept.exit_code == 1
    assert kept.stdout.splitlines()[-1] == (f"report: {tmp_path / 'p.json'}, "
                                            f"{tmp_path / 'p.html'}, {tmp_path / 'p.xml'}")
    assert _error_line(kept).endswith(f"; see {tmp_path / 'p.json'}")
    assert all((tmp_path / name).is_file() for name in ("p.json", "p.html", "p.xml"))


@pytest.mark.slow
def test_quiet_prints_the_verdict_only(simplecnn):
    result = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", 32, "-q")
    assert result.exit_code == 0
    assert result.output.strip().startswith("parity PASSED (1/1 candidates")


@pytest.mark.slow
def test_golden_outputs_round_trip(simplecnn, corrupted_fp16, renormalized_fp16, tmp_path):
    golden = tmp_path / "golden.npz"
    made = _parity(simplecnn["mindir_fp32"], "--save-outputs", golden, "--samples", 64)
    assert made.exit_code == 0, made.output
    with np.load(golden) as z:
        assert z["output_0"].shape == (64, 10) and z["labels"].shape == (64,)
    ok = _parity("--load-outputs", golden, simplecnn["mindir_fp16"], simplecnn["mindir_fp32"])
    assert ok.exit_code == 0, ok.output
    assert "golden" in ok.output
    bad = _parity("--load-outputs", golden, corrupted_fp16)
    assert bad.exit_code == 1
    renorm = _parity("--load-outputs", golden, renormalized_fp16)
    assert renorm.exit_code == 1
    assert "input normalization differs" in _error_line(renorm)


@pytest.mark.slow
def test_given_inputs_file(simplecnn, tmp_path):
    rng = np.random.default_rng(0)
    good = tmp_path / "in.npz"
    np.savez(good, x=rng.standard_normal((20, 1, 28, 28)).astype(np.float32))
    result = _parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--inputs", good)
    assert result.exit_code == 0, result.output
    assert "(20 samples), no labels" in result.output
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, a=np.zeros((2, 1, 28, 28), np.float32), b=np.zeros(2))
    line = _error_line(_parity(simplecnn["mindir_fp32"], simplecnn["mindir_fp16"],
                               "--inputs", wrong))
    assert "has arrays a, b" in line


@pytest.mark.slow
def test_threshold_flags_and_config_file(simplecnn, tmp_path):
    pair = (simplecnn["mindir_fp32"], simplecnn["mindir_fp16"], "--samples", 48)
    strict = _parity(*pair, "--min-cosine", "1.01")
    assert strict.exit_code == 1 and "cosine" in _error_line(strict)
    cfg = tmp_path / "parity.toml"
    cfg.write_text('samples = 48\n[thresholds]\nmin_top1 = "off"\n'
                   '[thresholds.fp16_vs_fp32]\nmax_abs = 1e-9\n')
    js = tmp_path / "r.json"
    from_file = _parity(*pair[:2], "--config", cfg, "--json-out", js)
    assert from_file.exit_code == 1, from_file.output
    checks = {r["metric"]: r
              for r in json.loads(js.read_text())["candidates"][0]["outputs"][0]["checks"]}
    assert "top1_agree_clear" not in checks and not checks["max_abs"]["passed"]
    overridden = _parity(*pair[:2], "--config", cfg, "--max-abs", "off")
    assert overridden.exit_code == 0, overridden.output


def test_default_thresholds_per_pair():
    from amptool.stats.limits import resolve_thresholds

    fp16 = resolve_thresholds("fp32", "fp16")
    fp32 = resolve_thresholds("fp32", "fp32")
    assert (fp16.min_cosine, fp16.min_top1, fp16.max_acc_drop, fp16.max_abs) == (
        0.999, 0.99, 0.005, None)
    assert fp32.max_abs is None and fp32.max_abs_scaled == 1e-4 and fp32.min_top1 == 1.0
    assert fp16.max_abs_scaled is None and fp16.max_metric_drop == fp32.max_metric_drop == 0.0
    tuned = resolve_thresholds("fp32", "fp16",
                               {"min_cosine": 0.9, "same_precision": {"max_abs": 1.0}},
                               {"max_rel": 0.5})
    assert (tuned.min_cosine, tuned.max_abs, tuned.max_rel) == (0.9, None, 0.5)


@pytest.mark.slow
def test_mistakes_exit_2_with_one_line(simplecnn, seeded_export, tmp_path):
    ref, cand = simplecnn["mindir_fp32"], simplecnn["mindir_fp16"]
    junk = tmp_path / "junk.npz"
    np.savez(junk, q=np.zeros(3))
    listed = tmp_path / "listed.npz"  # a golden file whose meta is JSON but not a mapping
    np.savez(listed, meta=np.frombuffer(b"[1, 2]", dtype=np.uint8), input_0=np.zeros(3))
    bad_cfg = tmp_path / "bad.toml"
    bad_cfg.write_text("[thresholds]\nmin_cosin = 0.9\n")
    str_cfg = tmp_path / "str.toml"
    str_cfg.write_text('samples = "many"\n')
    lonely = tmp_path / "lonely.ckpt"
    lonely.write_bytes(open(simplecnn["run"] + "/best.ckpt", "rb").read())
    cases = [
        ([tmp_path / "missing.mindir", cand], "does not exist"),
        ([ref], "no candidate to compare"),
        ([ref, seeded_export("lenet5")["mindir_fp16"]], "input shapes cannot match"),
        ([ref, cand, "--min-cosine", "high"], "--min-cosine takes a number or 'off'"),
        ([ref, cand, "--samples", "0"], "--samples must be a whole number >= 1"),
        ([ref, cand, "--data", "nowhere"], "unknown data source"),
        ([ref, cand, "--config", bad_cfg], "unknown threshold(s) min_cosin"),
        ([ref, cand, "--config", str_cfg], "--samples must be a whole number >= 1 (got 'many')"),
        (["--load-outputs", junk, cand], "is not a golden outputs file"),
        (["--load-outputs", listed, cand], "is not a golden outputs file"),
        (["--load-outputs", junk, "--save-outputs", tmp_path / "g.npz", cand],
         "exclude each other"),
        ([lonely, cand], "pass --model"),
        ([ref, tmp_path / "bad.toml"], "unknown artefact type"),
        ([ref, cand, "--device", "TPU"], "unknown device 'TPU'"),
        ([ref, cand, "--inputs", junk, "--data", "digits"], "exclude each other"),
    ]
    for args, message in cases:
        result = _parity(*args)
        assert result.exit_code == 2, (args, result.output)
        assert message in _error_line(result), (args, result.output)


@pytest.mark.slow
def test_encrypted_artefacts_with_a_key_file(simplecnn, tmp_path):
    import secrets

    from amptool.export.api import ExportConfig, export

    key = tmp_path / "key.hex"
    key.write_text(secrets.token_hex(16))
    results = export(ExportConfig(run=simplecnn["run"], formats=("MINDIR",),
                                  out=str(tmp_path / "enc"),
                                  encrypt_key=bytes.fromhex(key.read_text())))
    paths = {r.precision: r.path for r in results}
    locked = _parity(paths["fp32"], paths["fp16"], "--samples", 16)
    assert locked.exit_code == 2 and "encrypted" in _error_line(locked)
    result = _parity(paths["fp32"], paths["fp16"], "--key-file", key, "--samples", 32,
                     "--per-layer", "--layer-samples", 4)
    assert result.exit_code == 0, result.output
    assert "weights: not compared (both sides use checkpoint" in result.output


@pytest.mark.slow
def test_parity_as_a_subprocess(trap):
    import subprocess
    from pathlib import Path

    exe = Path(sys.executable).with_name("amptool")
    done = subprocess.run([str(exe), "parity", trap["mindir_fp32"], trap["mindir_fp16"],
                           "--samples", "32", "-q"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip().startswith("parity FAILED")
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert errors[-1].startswith("amptool: error: parity failed for trapmlp_fp16.mindir")
    assert "Traceback" not in done.stderr


def test_a_golden_files_model_is_vetted_before_it_runs(tmp_path):
    """The model a golden file names is a file's word, like a manifest's."""
    from amptool.errors import UsageError
    from amptool.network.models import resolve_model
    from amptool.parity.inputs import load_golden

    meta = {"reference": "r.mindir", "format": "MINDIR", "precision": "fp32", "preprocess": None,
            "description": "x", "model": f"{tmp_path}/evil.py:build",
            "inputs_meta": [{"name": "x", "shape": [-1, 3], "dtype": "float32"}],
            "outputs_meta": [{"name": "y", "shape": [-1, 4], "dtype": "float32"}]}
    golden = tmp_path / "golden.npz"
    np.savez(golden, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
             input_0=np.zeros((2, 3), np.float32), output_0=np.zeros((2, 4), np.float32))
    src, _, _ = load_golden(str(golden))
    with pytest.raises(UsageError, match="does not run on a file's word"):
        resolve_model(src.model_ref)
