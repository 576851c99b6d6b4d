"""``amptool train`` from the command line: bad input gets one line and exit 2, nothing written."""
import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def assert_one_line_error(code, output, *fragments):
    assert code == 2, output
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amptool: error: "), output
    assert "Traceback" not in output
    for fragment in fragments:
        assert fragment in lines[0], output


@pytest.fixture
def out(tmp_path):
    return tmp_path / "run"


def test_unknown_model(out):
    code, output = invoke("train", "--model", "nonet", "--out", out)
    assert_one_line_error(code, output, "unknown model 'nonet'", "simplecnn")


def test_unknown_data_and_missing_path(out, tmp_path):
    assert_one_line_error(*invoke("train", "--data", "cifar", "--out", out), "unknown data source")
    assert_one_line_error(*invoke("train", "--data", f"npz:{tmp_path / 'none.npz'}", "--out", out),
                          "does not exist")
    assert_one_line_error(*invoke("train", "--data", "mnist", "--out", out), "needs a path")


def test_unknown_level_optimizer_device(out):
    assert_one_line_error(*invoke("train", "--amp-level", "O5", "--out", out), "unknown AMP level")
    assert_one_line_error(*invoke("train", "--optimizer", "lion", "--epochs", "1", "--out", out),
                          "unknown optimizer")
    assert_one_line_error(*invoke("train", "--device", "TPU", "--out", out), "unknown device")
    assert_one_line_error(*invoke("train", "--device", "Ascend", "--out", out), "not usable")
    assert_one_line_error(*invoke("train", "--loss-scale", "huge", "--out", out),
                          "unknown loss scale")


def test_unknown_option_is_a_usage_error(out):
    code, output = invoke("train", "--no-such-flag")
    assert code == 2 and "No such option" in output


@pytest.mark.slow
def test_model_file_factory(tmp_path, out):
    good = tmp_path / "mynet.py"
    good.write_text(
        "from mindspore import nn\n"
        "class Net(nn.Cell):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.flat = nn.Flatten()\n"
        "        self.fc = nn.Dense(64, 10)\n"
        "    def construct(self, x):\n"
        "        return self.fc(self.flat(x))\n"
        "def make():\n"
        "    return Net()\n"
        "make.input_shape = (1, 8, 8)\n"
        "make.num_classes = 10\n"
        "def broken():\n"
        "    return 42\n"
        "def undeclared():\n"
        "    return Net()\n")
    code, output = invoke("train", "--model", f"{good}:make", "--epochs", "1", "--out", out,
                          "--quiet", "--json")
    assert code == 0, output
    assert json.loads(output)["val_acc"] > 0.5
    out = tmp_path / "next"  # a fresh folder: the trained run in the first is not replaced
    assert_one_line_error(*invoke("train", "--model", f"{good}:broken", "--out", out),
                          "not an nn.Cell")
    assert_one_line_error(*invoke("train", "--model", f"{good}:undeclared", "--out", out),
                          "input_shape")
    assert_one_line_error(*invoke("train", "--model", f"{good}:missing", "--out", out),
                          "no callable 'missing'")
    bad = tmp_path / "bad.py"
    bad.write_text("import not_a_module_anywhere\n")
    assert_one_line_error(*invoke("train", "--model", f"{bad}:make", "--out", out),
                          "failed to import")
    assert_one_line_error(*invoke("train", "--model", f"{tmp_path / 'no.py'}:make", "--out", out),
                          "does not exist")


def test_data_that_does_not_fit(tmp_path, out):
    two_channel = tmp_path / "two.npz"
    np.savez(two_channel, x=np.zeros((20, 2, 8, 8), np.float32), y=np.zeros(20, np.int64))
    assert_one_line_error(*invoke("train", "--data", f"npz:{two_channel}", "--out", out),
                          "2 channels")
    nan = tmp_path / "nan.npz"
    x = np.random.rand(20, 8, 8).astype(np.float32)
    x[3, 2, 2] = np.nan
    np.savez(nan, x=x, y=np.arange(20) % 10)
    assert_one_line_error(*invoke("train", "--data", f"npz:{nan}", "--out", out), "NaN/Inf")
    labels = tmp_path / "labels.npz"
    np.savez(labels, x=np.random.rand(20, 8, 8), y=np.arange(20))
    assert_one_line_error(*invoke("train", "--data", f"npz:{labels}", "--out", out), "labels span")
    assert not out.exists() or not any(out.glob("*.ckpt"))


def test_out_is_a_file_or_unwritable(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert_one_line_error(*invoke("train", "--out", afile), "is a file")
    assert_one_line_error(*invoke("train", "--out", afile / "sub"), "cannot create output folder")
    assert afile.read_text() == "x"


def test_resume_without_checkpoint(out):
    assert_one_line_error(*invoke("train", "--resume", "--out", out), "no checkpoint")
    assert not out.exists()


@pytest.mark.slow
def test_config_files(tmp_path, out, tiny_digits):
    bad_keys = tmp_path / "bad.yaml"
    bad_keys.write_text("epochs: 1\nlearning_rate: 0.1\nbatchsize: 4\n")
    code, output = invoke("train", "--config", bad_keys, "--out", out)
    assert_one_line_error(code, output, "learning_rate", "batchsize")
    malformed = tmp_path / "bad.toml"
    malformed.write_text("epochs = [1,\n")
    assert_one_line_error(*invoke("train", "--config", malformed, "--out", out), "malformed")
    wrong_type = tmp_path / "wrong.toml"
    wrong_type.write_text('epochs = "many"\n')
    assert_one_line_error(*invoke("train", "--config", wrong_type, "--out", out), "epochs")
    good = tmp_path / "good.toml"
    good.write_text('model = "lenet5"\nepochs = 3\namp_level = "O0"\nquiet = true\n')
    code, output = invoke("train", "--config", good, "--epochs", "1", "--data", tiny_digits,
                          "--out", out)
    assert code == 0, output
    assert output.startswith("done: lenet5 O0") and output.count("\n") == 1, output  # quiet
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["model"] == "lenet5" and run["config"]["epochs"] == 1
    assert run["policy"]["level"] == "O0"


def test_config_file_takes_the_launch_options(tmp_path, out):
    """Every option of the command is a config key: the layout keys reach the launcher,
    whose checks refuse each bad value before anything starts, and flags override them."""
    def config(text):
        path = tmp_path / "layout.yaml"
        path.write_text(text)
        return path

    assert_one_line_error(*invoke("train", "--config", config(
        "workers: 2\nnodes: 2\nnode_rank: 2\nmaster_port: 8118\n"), "--out", out),
        "node rank must be in 0..1")
    assert_one_line_error(*invoke("train", "--config", config(
        "workers: 2\nnodes: 2\nnode_rank: 2\nmaster_addr: 10.0.0.1\n"), "--nodes", "3",
        "--out", out), "several nodes need one --master-port")
    assert_one_line_error(*invoke("train", "--config", config("workers: 2\nmaster_port: 80\n"),
                                  "--out", out), "master port must be 0 or in 1024..65535")
    assert_one_line_error(*invoke("train", "--config", config("workers: 2\nstart_timeout: -1\n"),
                                  "--out", out), "start timeout must be > 0")
    assert_one_line_error(*invoke("train", "--config", config(
        "start_timeout: soon\nquiet: 3\njson: true\nnodse: 2\n"), "--out", out),
        "start_timeout must be a number", "quiet must be true or false", "unknown key 'nodse'")
    assert not out.exists()


@pytest.mark.slow
def test_divergence_exits_1_and_keeps_last_good_checkpoint(out, tiny_digits):
    code, output = invoke("train", "--epochs", "1", "--optimizer", "sgd", "--lr", "0.05",
                          "--data", tiny_digits, "--out", out, "--quiet")
    assert code == 0, output
    before = (out / "last.ckpt").read_bytes()
    code, output = invoke("train", "--resume", "--epochs", "2", "--lr", "1e30",
                          "--optimizer", "sgd", "--loss-scale", "none", "--data", tiny_digits,
                          "--out", out, "--quiet")
    assert code == 1, output
    assert "loss became" in output and "last good checkpoint" in output
    assert (out / "last.ckpt").read_bytes() == before


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_resume_refuses_another_optimizer_and_keeps_a_finished_run(tmp_path, out, fmt,
                                                                   first_epoch):
    import shutil

    shutil.copytree(first_epoch(fmt), out)  # ``amptool train --epochs 1 --ckpt-format fmt``
    last = out / f"last.{fmt}"
    files = {name: (out / name).read_bytes() for name in (last.name, "run.json", "metrics.jsonl")}
    assert_one_line_error(*invoke("train", "--resume", "--epochs", "2", "--optimizer", "sgd",
                                  "--out", out), "holds adam state", "--optimizer adam")
    if fmt == "safetensors":  # a checkpoint that names no optimizer: run.json says which
        from amptool.network.checkpoint import read_checkpoint
        from amptool.runtime.device import import_mindspore

        ms = import_mindspore()
        raw = ms.load_checkpoint(str(last), format="safetensors")
        os.chmod(last, 0o600)
        ms.save_checkpoint([{"name": k, "data": v} for k, v in raw.items()
                            if not k.startswith("amptool_text.")], str(last), format="safetensors")
        assert "optimizer" not in read_checkpoint(last)
        assert_one_line_error(*invoke("train", "--resume", "--epochs", "2", "--optimizer", "sgd",
                                      "--out", out), "holds adam state", "--optimizer adam")
        files[last.name] = last.read_bytes()
    # resumed with the epochs it already has: its own figures, nothing rewritten
    recorded = json.loads(files["run.json"])["summary"]
    again = tmp_path / "again.yaml"
    again.write_text("resume: true\nepochs: 1\njson: true\n")
    code, output = invoke("train", "--config", again, "--out", out)
    assert code == 0, output
    summary = json.loads(output)
    assert summary["already_finished"] is True
    for key in ("val_acc", "best_acc", "steps", "overflow_steps", "loss_scale", "final_loss",
                "samples_per_s", "weights_sha256"):
        assert summary[key] == recorded[key], key
    assert 0.5 < summary["val_acc"] <= 1.0
    code, output = invoke("train", "--resume", "--out", out, "--epochs", "1")
    assert code == 0 and "nothing to train" in output and "already finished: simplecnn" in output
    assert {name: (out / name).read_bytes() for name in files} == files


@pytest.mark.slow
def test_consecutive_overflows_diverge(out):
    code, output = invoke("train", "--epochs", "1", "--scale-init", "1e30", "--max-skipped", "3",
                          "--out", out)
    assert code == 1, output
    assert "consecutive overflow steps skipped" in output and "--max-skipped is 3" in output
    assert not (out / "last.ckpt").exists()

