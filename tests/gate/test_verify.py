"""``amptool verify`` and ``amptool.gate.verify.verify``: each answer on real artefacts checked
by real parity runs: verified (the bytes under any name, a split artefact's weight files
included), never tested (a flipped byte, other weight files), failed, passed only under looser
limits, a later failure; from a ledger and from a report; exit 2 for what cannot be read."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.gate.verify import FAILED, LATER, LOOSER, NEVER, PASSED, verify

pytestmark = pytest.mark.slow  # parity runs
ROOT = Path(__file__).resolve().parents[1]
STRICT = {"max_abs": 1e-9}
"""A limit no fp16 or cross-format candidate meets: its check fails."""
runner = CliRunner()


def _parity(ledger, reference, *candidates, thresholds=None, data=None, json_out=None):
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig
    from amptool.parity.report import write_report_json

    report = parity(ParityConfig(reference=str(reference), candidates=tuple(map(str, candidates)),
                                 samples=32, data=data, thresholds=thresholds or {},
                                 ledger=str(ledger) if ledger else None))
    if json_out is not None:
        write_report_json(str(json_out), report)
    return report


def _split_export(out: Path) -> dict:
    """wide_mlp (tests/export/user_models.py) exported as MindSpore writes a big network: a
    graph file and a variables folder of weights."""
    spec = importlib.util.spec_from_file_location("user_models",
                                                  ROOT / "export" / "user_models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    ckpt = models.save_init_checkpoint(models.wide_mlp, out / "wide.ckpt")
    from amptool.export.api import ExportConfig, export

    os.environ["AMPTOOL_SPLIT_BYTES"] = "4096"
    try:
        results = export(ExportConfig(ckpt=str(ckpt), model=f"{models.__file__}:wide_mlp",
                                      data="none", formats=("MINDIR",), out=str(out / "split")))
    finally:
        del os.environ["AMPTOOL_SPLIT_BYTES"]
    return {r.precision: r.path for r in results}


@pytest.fixture(scope="module")
def checked(simplecnn_export, tmp_path_factory):
    """Real artefacts and the ledger (and reports) of their parity checks:
    simplecnn's MINDIR fp16 passed; the split wide_mlp fp16 passed; simplecnn's ONNX fp16
    failed; its ONNX fp32 passed only with min_cosine 0.9; and, in a second ledger, the
    MINDIR fp16 passed, then failed a later check."""
    pytest.importorskip("onnx")
    tmp = tmp_path_factory.mktemp("verify")
    art = {f"{f.lower()}_{p}": Path(v) for (f, p), v in simplecnn_export.items()}
    art.update({f"split_{p}": Path(v) for p, v in _split_export(tmp).items()})
    ledger, later = tmp / "ledger.db", tmp / "later.db"
    ref = art["mindir_fp32"]
    _parity(ledger, ref, art["mindir_fp16"], json_out=tmp / "passed.json")
    _parity(ledger, art["split_fp32"], art["split_fp16"], data="digits")
    _parity(ledger, ref, art["onnx_fp16"], thresholds=STRICT, json_out=tmp / "failed.json")
    _parity(ledger, ref, art["onnx_fp32"], thresholds={"min_cosine": 0.9})
    _parity(later, ref, art["mindir_fp16"])
    _parity(later, ref, art["mindir_fp16"], thresholds=STRICT)
    return {**art, "ledger": ledger, "later": later, "tmp": tmp}


def _copy(src: Path, dst: Path, flip: int = -1) -> Path:
    """A copy of ``src`` (with a split MINDIR's variables folder) named ``dst``; ``flip``:
    invert one byte at that offset of the main file."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    if src.name.endswith("_graph.mindir"):
        folder = src.name[:-len("_graph.mindir")] + "_variables"
        shutil.copytree(src.parent / folder, dst.parent / (dst.name[:-len("_graph.mindir")]
                                                           + "_variables"))
    if flip >= 0:
        data = bytearray(dst.read_bytes())
        data[flip] ^= 0xFF
        dst.write_bytes(bytes(data))
    return dst


def test_the_bytes_that_passed_are_verified_under_any_name(checked):
    found = verify(str(checked["mindir_fp16"]), ledger=str(checked["ledger"]))
    assert (found.passed, found.reason, found.records) == (True, PASSED, 1)
    assert found.record is not None and found.record.samples == 32
    renamed = _copy(checked["mindir_fp16"], checked["tmp"] / "deploy" / "model.mindir")
    result = runner.invoke(app, ["verify", str(renamed), "--ledger", str(checked["ledger"])])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{renamed}: verified: record #1 (")
    split = verify(str(checked["split_fp16"]), ledger=str(checked["ledger"]))
    assert split.passed and [f["path"] for f in split.files] == [
        "wide_mlp_fp16_graph.mindir", "wide_mlp_fp16_variables/data_0"]


def test_other_bytes_were_never_tested(checked):
    flipped = _copy(checked["mindir_fp16"], checked["tmp"] / "flip" / "model.mindir", flip=200)
    result = runner.invoke(app, ["verify", str(flipped), "--ledger", str(checked["ledger"])])
    assert result.exit_code == 1
    assert (f"amptool: error: {flipped}: never tested: no check of these bytes was recorded; "
            "check it with amptool parity --ledger") in result.output
    graph = _copy(checked["split_fp16"], checked["tmp"] / "w" / "wide_mlp_fp16_graph.mindir")
    data = graph.parent / "wide_mlp_fp16_variables" / "data_0"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0x01
    data.write_bytes(bytes(raw))
    found = verify(str(graph), ledger=str(checked["ledger"]))
    assert found.reason == NEVER and "its graph was checked, with other weight files" in found.line
    assert verify(str(checked["mindir_fp32"]), ledger=str(checked["ledger"])).reason == NEVER


def test_a_failed_check_fails(checked):
    result = runner.invoke(app, ["verify", str(checked["onnx_fp16"]), "--ledger",
                                 str(checked["ledger"])])
    assert result.exit_code == 1
    line = next(x for x in result.output.splitlines() if x.startswith("amptool: error:"))
    assert ": failed: record #3 (" in line and "failed parity (output0: max_abs" in line


def test_a_pass_under_looser_limits_is_no_pass(checked):
    found = verify(str(checked["onnx_fp32"]), ledger=str(checked["ledger"]))
    assert found.reason == LOOSER and not found.passed
    assert "held output0: min_cosine 0.9, the gate needs >= 0.99999" in found.line
    # a gate configured looser still (its config file, or flags) lets it through
    config = checked["tmp"] / "gate.toml"
    config.write_text("samples = 200\n[thresholds.same_precision]\nmin_cosine = 0.9\n")
    assert verify(str(checked["onnx_fp32"]), ledger=str(checked["ledger"]),
                  config=str(config)).passed
    result = runner.invoke(app, ["verify", str(checked["onnx_fp32"]), "--ledger",
                                 str(checked["ledger"]), "--min-cosine", "0.9"])
    assert result.exit_code == 0, result.output
    # and a gate stricter than the check's limits refuses a pass made under the defaults
    strict = verify(str(checked["mindir_fp16"]), ledger=str(checked["ledger"]),
                    limits={"min_cosine": 0.9999999999})
    assert strict.reason == LOOSER and "min_cosine 0.999, the gate needs >= 0.9999999999" \
        in strict.line


def test_verify_takes_every_limit_flag_parity_takes(checked):
    """The limits only parity's own flags set (--max-abs-scaled, --atol, --rtol,
    --max-metric-drop, --allow-nonfinite) hold a record as parity's do."""
    ledger = ["--ledger", str(checked["ledger"])]
    art = str(checked["mindir_fp16"])
    strict = runner.invoke(app, ["verify", art, *ledger, "--max-abs-scaled", "1e-9"])
    assert strict.exit_code == 1
    assert "max_abs_scaled off, the gate needs <= 1e-09" in strict.output
    tolerances = runner.invoke(app, ["verify", art, *ledger, "--max-outside", "0.5",
                                     "--atol", "0", "--rtol", "0"])
    assert tolerances.exit_code == 1 and "max_outside off, the gate needs <= 0.5" \
        in tolerances.output
    loose = runner.invoke(app, ["verify", art, *ledger, "--max-abs-scaled", "off",
                                "--max-metric-drop", "0.01", "--allow-nonfinite"])
    assert loose.exit_code == 0, loose.output
    help_text = runner.invoke(app, ["verify", "--help"]).output
    for flag in ("--max-abs-scaled", "--max-metric-drop", "--atol", "--rtol",
                 "--allow-nonfinite"):
        assert flag in help_text


def test_a_later_failure_undoes_a_pass(checked):
    found = verify(str(checked["mindir_fp16"]), ledger=str(checked["later"]))
    assert found.reason == LATER and found.record is not None and found.record.id == 2
    assert "a later failure: record #2 (" in found.line and "after record #1 (" in found.line


def test_a_report_answers_the_same(checked):
    tmp = checked["tmp"]
    assert verify(str(checked["mindir_fp16"]), report=str(tmp / "passed.json")).passed
    assert verify(str(checked["onnx_fp16"]), report=str(tmp / "failed.json")).reason == FAILED
    assert verify(str(checked["onnx_fp16"]), report=str(tmp / "passed.json")).reason == NEVER
    old = json.loads((tmp / "passed.json").read_text())
    for cand in old["candidates"]:
        del cand["files"]
    (tmp / "old.json").write_text(json.dumps(old))
    found = verify(str(checked["mindir_fp16"]), report=str(tmp / "old.json"))
    assert found.reason == NEVER and "records no sha256 of its 1 candidate(s)" in found.line


@pytest.mark.parametrize("args, said", [
    (["{missing}", "--ledger", "{ledger}"], "artefact {missing} does not exist"),
    (["{art}"], "verify needs one source: --ledger URL or --report parity.json"),
    (["{art}", "--ledger", "{ledger}", "--report", "{ledger}"], "verify needs one source"),
    (["{art}", "--ledger", "{tmp}/none.db"], "ledger sqlite:///{tmp}/none.db does not exist"),
    (["{art}", "--report", "{garbage}"], "parity report {garbage} cannot be read"),
    (["{art}", "--report", "{newer}"], "newer than amptool"),
])
def test_what_cannot_be_read_is_exit_2(args, said, checked):
    tmp = checked["tmp"]
    (tmp / "garbage.json").write_text("{ not json")
    newer = json.loads((tmp / "passed.json").read_text())
    (tmp / "newer.json").write_text(json.dumps(dict(newer, schema_version=99)))
    fill = {"missing": str(tmp / "gone.mindir"), "ledger": str(checked["ledger"]),
            "art": str(checked["mindir_fp16"]), "tmp": str(tmp),
            "garbage": str(tmp / "garbage.json"), "newer": str(tmp / "newer.json")}
    result = runner.invoke(app, ["verify", *[a.format(**fill) for a in args]])
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.startswith("amptool: error:")]
    assert len(lines) == 1 and said.format(**fill) in lines[0], result.output
