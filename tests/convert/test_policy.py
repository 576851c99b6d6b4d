"""Policy files: round trips in every format, levels as policies, one error for all unknowns."""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.errors import UsageError
from amptool.precision.apply import apply_policy, cell_dtypes
from amptool.precision.policy import Policy, load_policy, make_policy, save_policy

runner = CliRunner()


def _one_line_error(result, code=2):
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amptool: error:"), result.output
    assert "Traceback" not in result.output
    return lines[0]


FULL = make_policy("O3", "fp16", fp32_types=["Softmax", "LayerNorm"],
                   fp32_cells=["blocks.1.attn.softmax", "head"], fp16_cells=["blocks.0.norm1"])


@pytest.mark.parametrize("name", ["p.toml", "p.yaml", "p.yml", "p.json"])
def test_policy_round_trips_in_every_format(tmp_path, name):
    path = save_policy(FULL, tmp_path / name)
    assert load_policy(path) == FULL
    with pytest.raises(UsageError, match="already exists"):
        save_policy(FULL, path)
    save_policy(make_policy("O2"), path, force=True)
    assert load_policy(path) == make_policy("O2")


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3"])
def test_every_level_is_a_policy_file(tmp_path, level):
    result = runner.invoke(app, ["convert", "policy", "--level", level, "--out",
                                 str(tmp_path / "level.toml")])
    assert result.exit_code == 0, result.output
    assert load_policy(tmp_path / "level.toml") == Policy(level=level)


def test_policy_read_from_a_run_json(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"config": {}, "policy": FULL.to_dict()}))
    assert load_policy(tmp_path / "run.json") == FULL


def test_unknown_keys_and_values_are_one_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("level: O5\ndtype: fp8\nfp32_cells: [a]\n")
    line = _one_line_error(runner.invoke(app, ["convert", "policy", "--policy", str(bad)]))
    assert "unknown level 'O5'" in line and "unknown dtype 'fp8'" in line
    bad.write_text("level: O2\nkeep: [a]\n")
    assert "unknown key(s) keep" in _one_line_error(
        runner.invoke(app, ["convert", "policy", "--policy", str(bad)]))


def test_unknown_paths_and_types_listed_together(tmp_path):
    path = save_policy(make_policy("O3", fp32_types=["Softmax", "Sofmax"],
                                   fp32_cells=["blocks.0.attn.softmax", "blocks.9.attn", "nope"]),
                       tmp_path / "p.json")
    line = _one_line_error(runner.invoke(app, ["convert", "policy", "--policy", str(path),
                                               "--model", "transformer"]))
    assert line.split("unknown cell path(s) ")[1].split(";")[0] == "blocks.9.attn, nope"
    assert line.split("unknown cell type(s) ")[1].split(";")[0] == "Sofmax"


def test_bf16_refused_on_cpu():
    line = _one_line_error(runner.invoke(app, ["convert", "policy", "--dtype", "bf16",
                                               "--device", "CPU"]))
    assert "bfloat16 is not supported on CPU" in line


def test_level_o2_shows_each_cell_dtype():
    result = runner.invoke(app, ["convert", "policy", "--level", "O2", "--model", "resnet"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[2:]
            if len(line.split()) == 4}
    assert rows["layer1.bn1"][:2] == ["BatchNorm2d", "float32"]
    assert rows["layer1.conv1"][:2] == ["Conv2d", "float16"]
    assert rows["fc"][:2] == ["Dense", "float16"]
    result = runner.invoke(app, ["convert", "policy", "--level", "O3", "--fp32-cell",
                                 "blocks.1.attn.softmax", "--model", "transformer", "--json"])
    cells = {c["path"]: c["dtype"] for c in json.loads(result.output)["cells"]}
    assert cells["blocks.1.attn.softmax"] == "float32"
    assert cells["blocks.0.attn.softmax"] == "float16" and cells["blocks.0.norm1"] == "float16"


def test_kept_cells_map_to_source_in_the_table_the_json_and_the_file(tmp_path):
    args = ["convert", "policy", "--level", "O2", "--fp32-cell", "norm", "--model", "trapmlp"]
    shown = runner.invoke(app, args + ["--out", str(tmp_path / "p.toml")])
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.output.splitlines() if x.startswith("fp32 cell norm:"))
    assert line.startswith("fp32 cell norm: L2Normalize (models.py:") and line.endswith(")")
    import inspect

    from samples.models import L2Normalize

    assert line == (f"fp32 cell norm: L2Normalize "
                    f"(models.py:{inspect.getsourcelines(L2Normalize.construct)[1]})")
    assert f"# fp32 cell norm: {line.split(': ', 1)[1]}" in (tmp_path / "p.toml").read_text()
    data = json.loads(runner.invoke(app, args + ["--json"]).output)
    assert data["kept_where"] == {"norm": line.split(": ", 1)[1]}


@pytest.mark.slow
def test_o2_equals_o3_with_its_black_list_as_types():
    """The built-in O2 is the same policy as O3 keeping BatchNorm2d in fp32: same dtypes, same
    outputs."""
    import mindspore as ms

    from amptool.network.models import sample_spec

    spec = sample_spec("resnet")
    ms.set_seed(0)
    nets = [spec.build() for _ in range(2)]
    ms.load_param_into_net(nets[1], {p.name: p for p in nets[0].get_parameters()})
    as_types = make_policy("O3", fp32_types=["BatchNorm2d"])
    assert cell_dtypes(nets[0], make_policy("O2")) == cell_dtypes(nets[1], as_types)
    for net in nets:
        net.set_train(False)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype(np.float32))
    out_o2 = apply_policy(nets[0], make_policy("O2"))(x).asnumpy()
    out_types = apply_policy(nets[1], as_types)(x).asnumpy()
    np.testing.assert_array_equal(out_o2, out_types)


def test_a_limit_that_is_no_number_is_one_line():
    line = _one_line_error(runner.invoke(app, ["convert", "search", "--min-cosine", "high"]))
    assert "--min-cosine takes a number" in line


@pytest.mark.slow
def test_cli_as_a_subprocess():
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("amptool")
    done = subprocess.run([str(exe), "convert", "policy", "--level", "O2", "--model", "lenet5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "conv1" in done.stdout and "float16" in done.stdout
