"""A factory that needs arguments, through every command that rebuilds the network:
--model-arg where the user names the model, run.json's recorded arguments where not."""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app

pytestmark = pytest.mark.slow  # trains a small network

runner = CliRunner()

FACTORY = '''
from mindspore import nn


class Net(nn.Cell):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Dense(8, width)
        self.act = nn.ReLU()
        self.head = nn.Dense(width, 3)

    def construct(self, x):
        return self.head(self.act(self.fc(x)))


def build(width):
    return Net(width)


build.input_signature = "x:-1x8:float32"
'''


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


def _error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("amptool: error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("model_args")
    (root / "net.py").write_text(FACTORY)
    rng = np.random.RandomState(0)
    x = rng.randn(256, 8).astype(np.float32)
    np.savez(root / "data.npz", x=x, y=np.argmax(x[:, :3], axis=1))
    model = f"{root}/net.py:build"
    _ok(runner.invoke(app, ["train", "--model", model, "--model-arg", "width=5", "--data",
                            f"npz:{root}/data.npz", "--epochs", "1", "--quiet",
                            "--out", str(root / "run")]))
    return {"root": root, "model": model, "run": root / "run"}


def test_the_factory_needs_its_argument(trained):
    line = _error(runner.invoke(app, ["convert", "policy", "--model", trained["model"]]))
    assert "needs the model argument(s) width; pass --model-arg width=VALUE" in line


def test_convert_policy_takes_model_args(trained):
    result = _ok(runner.invoke(app, ["convert", "policy", "--model", trained["model"],
                                     "--model-arg", "width=5", "--json"]))
    cells = json.loads(result.output)["cells"]
    assert [(c["path"], c["params"]) for c in cells] == [("fc", 45), ("act", 0), ("head", 18)]


def test_convert_ckpt_rebuilds_with_the_runs_recorded_arguments(trained, tmp_path):
    """No --model: the checkpoint's model entry, with the arguments run.json records."""
    out = tmp_path / "half.ckpt"
    _ok(runner.invoke(app, ["convert", "ckpt", str(trained["run"] / "best.ckpt"), str(out),
                            "--to", "fp16", "--weights-only"]))
    assert out.is_file()
    line = _error(runner.invoke(app, ["convert", "ckpt", str(trained["run"] / "best.ckpt"),
                                      str(tmp_path / "b.ckpt"), "--to", "fp16",
                                      "--model", trained["model"]]))
    assert "needs the model argument(s) width" in line  # the user's model runs as given
    _ok(runner.invoke(app, ["convert", "ckpt", str(trained["run"] / "best.ckpt"),
                            str(tmp_path / "c.ckpt"), "--to", "fp16", "--model",
                            trained["model"], "--model-arg", "width=5"]))


def test_parity_and_search_take_model_args(trained, tmp_path):
    ckpt = str(trained["run"] / "best.ckpt")
    parity = ["parity", ckpt, ckpt, "--model", trained["model"], "--data",
              f"npz:{trained['root']}/data.npz", "--quiet"]
    assert "needs the model argument(s) width" in _error(runner.invoke(app, parity))
    _ok(runner.invoke(app, parity + ["--model-arg", "width=5"]))
    search = ["convert", "search", "--ckpt", ckpt, "--model", trained["model"], "--model-arg",
              "width=5", "--data", f"npz:{trained['root']}/data.npz", "--samples", "64",
              "--out", str(tmp_path / "policy.toml"), "--json"]
    result = json.loads(_ok(runner.invoke(app, search)).output)
    assert result["model"] == trained["model"] and result["kept"] == []
    assert (tmp_path / "policy.toml").is_file()


def test_model_args_without_a_model_are_refused(trained):
    ckpt = str(trained["run"] / "best.ckpt")
    line = _error(runner.invoke(app, ["parity", ckpt, ckpt, "--model-arg", "width=5"]))
    assert "--model-arg is given without --model" in line
    line = _error(runner.invoke(app, ["export", "--run", str(trained["run"]), "--input-spec",
                                      "x:-1x8:float32", "--out", "unused"]))
    assert "--input-spec is given without --model" in line
