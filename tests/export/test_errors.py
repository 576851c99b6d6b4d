"""Every bad input: one clear line, exit 2, nothing left behind; safe re-export and odd paths."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.files.fileio import sha256


cli = CliRunner()
HERE = Path(__file__).parent


def export(*args):
    return cli.invoke(app, ["export", *[str(a) for a in args]])


def assert_one_line_error(res, code, *words):
    assert res.exit_code == code, res.output
    assert res.output.startswith("amptool: error: ") and res.output.count("\n") == 1, res.output
    assert "Traceback" not in res.output
    for word in words:
        assert word in res.output, res.output


def leftovers(folder: Path) -> list:
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


@pytest.fixture(scope="module")
def run_dir(runs):
    return runs.get("simplecnn")


def test_air_is_refused_off_ascend_before_any_work(tmp_path):
    out = tmp_path / "air"
    res = export("--run", tmp_path / "no-such-run", "--format", "air", "--out", out)
    assert_one_line_error(res, 2, "AIR export needs an Ascend device with CANN", "CPU",
                          "export MINDIR instead")
    assert not out.exists()  # refused before even looking at the run folder


@pytest.mark.slow
def test_air_refusal_as_a_real_subprocess(tmp_path):
    amptool = Path(sys.executable).with_name("amptool")
    proc = subprocess.run([str(amptool), "export", "--run", str(tmp_path), "-f", "AIR"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[-1]] and "AIR export needs an Ascend device" in lines[-1], proc.stderr


@pytest.mark.parametrize("args, words", [
    (["-f", "TFLITE"], ["unknown format TFLITE", "MINDIR, AIR, ONNX"]),
    (["--precision", "int8"], ["unknown precision 'int8'", "fp32, fp16 or both"]),
    (["--io-dtype", "bf16"], ["unknown io dtype"]),
    (["--batch-size", "0"], ["batch size must be >= 1"]),
    (["--which", "worst"], ["unknown checkpoint 'worst'"]),
    (["--ckpt", "x.ckpt"], ["either --run DIR or --ckpt"]),
])
@pytest.mark.slow
def test_bad_options(args, words, run_dir, tmp_path):
    res = export("--run", run_dir, "--out", tmp_path / "o", *args)
    assert_one_line_error(res, 2, *words)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_bad_sources(run_dir, tmp_path):
    cases = [
        (["--run", tmp_path / "missing"], ["run folder", "does not exist"]),
        (["--run", tmp_path], ["has no run.json"]),
        (["--ckpt", tmp_path / "missing.ckpt", "--model", "simplecnn"], ["does not exist"]),
        (["--ckpt", run_dir / "best.ckpt"], ["--ckpt needs --model"]),
        (["--ckpt", run_dir / "best.ckpt", "--model", "nonesuch"], ["unknown model 'nonesuch'"]),
        (["--ckpt", run_dir / "best.ckpt", "--model", "lenet5", "--data", "none"],
         ["does not fit the model", "pass the --model"]),
    ]
    for args, words in cases:
        res = export(*args, "--out", tmp_path / "o")
        assert_one_line_error(res, 2, *words)
        assert leftovers(tmp_path / "o") == [], args


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "corrupt", "empty"])
def test_broken_checkpoint(damage, run_dir, tmp_path):
    data = (run_dir / "best.ckpt").read_bytes()
    broken = {"truncated": data[: len(data) // 2], "corrupt": b"\x00garbage" * 300,
              "empty": b""}[damage]
    ckpt = tmp_path / "broken.ckpt"
    ckpt.write_bytes(broken)
    res = export("--ckpt", ckpt, "--model", "simplecnn", "--data", "none", "-f", "mindir,onnx",
                 "--out", tmp_path / "o")
    words = ("is empty", "cut off") if damage == "empty" else ("cannot be read",
                                                               "truncated or corrupt")
    assert_one_line_error(res, 2, *words)
    assert leftovers(tmp_path / "o") == []


@pytest.mark.slow
def test_existing_artefacts_need_force_and_force_replaces_read_only_files(run_dir, tmp_path):
    out = tmp_path / "out"
    assert export("--run", run_dir, "--precision", "fp32", "--out", out).exit_code == 0
    target = out / "simplecnn_fp32.mindir"
    os.chmod(target, 0o400)  # as MindSpore itself writes them
    before, mtime = sha256(target), target.stat().st_mtime_ns
    res = export("--run", run_dir, "--precision", "fp32", "--out", out)
    assert_one_line_error(res, 2, "already exist", "nothing was touched", "--force")
    assert sha256(target) == before and target.stat().st_mtime_ns == mtime
    res = export("--run", run_dir, "--precision", "fp32", "--out", out, "--force")
    assert res.exit_code == 0, res.output
    assert target.stat().st_mtime_ns != mtime
    assert sorted(p.name for p in out.iterdir()) == ["simplecnn_fp32.mindir",
                                                    "simplecnn_fp32.mindir.json"]


@pytest.mark.slow
def test_out_path_with_space_and_plus(run_dir, tmp_path):
    from amptool.artefact.runners import load_runner

    out = tmp_path / "my models+v2" / "fp 16"
    res = export("--run", run_dir, "--precision", "fp16", "-f", "MINDIR,ONNX", "--out", out)
    assert res.exit_code == 0, res.output
    assert leftovers(out) == ["simplecnn_fp16.mindir", "simplecnn_fp16.mindir.json",
                              "simplecnn_fp16.onnx", "simplecnn_fp16.onnx.json"]
    runner = load_runner(out / "simplecnn_fp16.mindir")
    assert runner.run([__import__("numpy").zeros((1, 1, 28, 28), "float32")])[0].shape == (1, 10)


@pytest.mark.slow
def test_onnx_unsupported_operator_leaves_nothing(tmp_path):
    from .user_models import save_init_checkpoint, triu_net  # MindSpore: not at collection

    ckpt = save_init_checkpoint(triu_net, tmp_path / "triu.ckpt")
    out = tmp_path / "o"
    res = export("--ckpt", ckpt, "--model", f"{HERE / 'user_models.py'}:triu_net",
                 "--data", "none", "-f", "MINDIR,ONNX", "--out", out)
    assert_one_line_error(res, 2, "cannot convert operator Triu to ONNX", "export MINDIR")
    assert leftovers(out) == []  # the MINDIR written before the failure is not kept either


@pytest.mark.slow
def test_onnx_extra_missing(run_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if the onnx extra were not installed
    res = export("--run", run_dir, "-f", "ONNX", "--out", tmp_path / "o")
    assert_one_line_error(res, 2, "pip install 'amptool[onnx]'")
    assert not (tmp_path / "o").exists()


def test_inspect_bad_files(tmp_path):
    cases = [(tmp_path / "none.mindir", "does not exist"), (tmp_path / "x.txt", "unknown artefact"),
             (tmp_path / "bad.mindir", "cannot be read as MindIR"),
             (tmp_path / "bad.onnx", "cannot be read as ONNX")]
    (tmp_path / "x.txt").write_text("hello")
    (tmp_path / "bad.mindir").write_bytes(b"\x08\x01garbage" * 50)
    (tmp_path / "bad.onnx").write_bytes(b"\xff\xfe not onnx" * 50)
    for path, words in cases:
        assert_one_line_error(cli.invoke(app, ["inspect", str(path)]), 2, words)


@pytest.mark.slow
def test_truncated_artefact_is_refused(exports, tmp_path):
    from amptool.artefact.runners import load_runner
    from amptool.errors import UsageError

    for fmt, suffix in (("MINDIR", "mindir"), ("ONNX", "onnx")):
        data = open(exports.get("simplecnn")[(fmt, "fp32")].path, "rb").read()
        cut = tmp_path / f"cut.{suffix}"
        cut.write_bytes(data[: len(data) // 3])
        with pytest.raises(UsageError, match="cannot be"):
            load_runner(cut)


@pytest.mark.slow
def test_dynamic_batch_mindir_that_cannot_run_back_is_refused(tmp_path):
    from .user_models import baked_batch_net, save_init_checkpoint  # MindSpore: not collected

    ckpt = save_init_checkpoint(baked_batch_net, tmp_path / "baked.ckpt")
    out = tmp_path / "o"
    model = f"{HERE / 'user_models.py'}:baked_batch_net"
    res = export("--ckpt", ckpt, "--model", model, "--data", "none", "-f", "MINDIR",
                 "--dynamic-batch", "--out", out)
    assert_one_line_error(res, 2, "MindIR with dynamic dimensions that it cannot run back",
                          "drop --dynamic-batch")
    assert leftovers(out) == []
    res = export("--ckpt", ckpt, "--model", model, "--data", "none", "-f", "MINDIR",
                 "--batch-size", "2", "--out", out)
    assert res.exit_code == 0, res.output
