"""Precision policies: validation, files in three formats, precedence and the export rule."""
import json

import pytest

from amptool.errors import UsageError
from amptool.precision.policy import (Policy, export_policy, load_policy, make_policy, policy_for,
                                      policy_from_dict, save_policy)

RICH = {"level": "O2", "dtype": "bf16", "fp32_types": ["LayerNorm", "Softmax"],
        "fp32_cells": ["head.fc"], "fp16_cells": ["body.0.bn"]}


def test_make_policy_normalizes():
    p = make_policy("o3", "half", fp32_types=["BatchNorm2d"])
    assert p == Policy("O3", "float16", ("BatchNorm2d",), (), ())
    assert make_policy(**RICH).dtype == "bfloat16"
    assert make_policy() == Policy()
    assert make_policy("O0").describe() == "O0/float32"
    assert make_policy(**RICH).describe() == ("O2/bfloat16 (fp32 types LayerNorm,Softmax; "
                                              "fp32 cells head.fc; fp16 cells body.0.bn)")


def test_make_policy_reports_all_problems_at_once():
    with pytest.raises(UsageError) as err:
        make_policy("O5", "fp8", fp32_types="BatchNorm", fp32_cells=[1])
    text = str(err.value)
    assert "\n" not in text
    assert "unknown level 'O5'" in text
    assert "unknown dtype 'fp8'" in text
    assert "fp32_types must be a list of strings" in text
    assert "fp32_cells must be a list of strings" in text


@pytest.mark.parametrize("level", ["O0", "O1"])
def test_low_levels_take_no_cell_lists(level):
    with pytest.raises(UsageError, match=f"level {level} takes no cell lists"):
        make_policy(level, fp16_cells=["a"])


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".yml", ".json"])
def test_save_load_roundtrip(tmp_path, suffix):
    policy = make_policy(**RICH)
    path = save_policy(policy, tmp_path / f"policy{suffix}")
    assert path.is_file()
    assert load_policy(path) == policy
    plain = make_policy("O1")
    save_policy(plain, path, force=True)
    assert load_policy(path) == plain
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".amptool")]


def test_saved_json_is_plain_data(tmp_path):
    save_policy(make_policy(**RICH), tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text()) == {
        "level": "O2", "dtype": "bfloat16", "fp32_types": ["LayerNorm", "Softmax"],
        "fp32_cells": ["head.fc"], "fp16_cells": ["body.0.bn"]}


def test_save_policy_refusals(tmp_path):
    path = save_policy(make_policy("O3"), tmp_path / "p.toml")
    with pytest.raises(UsageError, match="already exists"):
        save_policy(make_policy("O2"), path)
    assert load_policy(path).level == "O3"
    with pytest.raises(UsageError, match="does not exist"):
        save_policy(make_policy(), tmp_path / "missing" / "p.toml")
    with pytest.raises(UsageError, match="unknown extension '.txt'"):
        save_policy(make_policy(), tmp_path / "p.txt")


def test_load_policy_from_run_json(tmp_path):
    run = {"config": {"model": "lenet5", "epochs": 2},
           "policy": {"level": "O3", "dtype": "float16", "fp32_types": [],
                      "fp32_cells": ["fc3"], "fp16_cells": []},
           "data": {"preprocess": {}}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert load_policy(tmp_path / "run.json") == Policy("O3", "float16", (), ("fc3",), ())


def test_unknown_keys_rejected(tmp_path):
    (tmp_path / "p.yaml").write_text("level: O2\nkeep_fp32: [fc]\nprecision: fp16\n")
    with pytest.raises(UsageError) as err:
        load_policy(tmp_path / "p.yaml")
    text = str(err.value)
    assert "unknown key(s) keep_fp32, precision" in text and "p.yaml" in text
    with pytest.raises(UsageError, match="mine: unknown key"):
        policy_from_dict({"lvl": "O2"}, source="mine")


def test_unknown_keys_and_bad_values_come_together(tmp_path):
    (tmp_path / "p.toml").write_text('level = "O9"\ndtype = "int8"\nkeep = ["fc"]\n')
    text = str(pytest.raises(UsageError, load_policy, tmp_path / "p.toml").value)
    assert "\n" not in text and "p.toml: unknown key(s) keep; bad precision policy: " \
        "unknown level 'O9'" in text and "unknown dtype 'int8'" in text, text


def test_bad_values_in_file_name_the_file(tmp_path):
    (tmp_path / "p.toml").write_text('level = "O9"\n')
    with pytest.raises(UsageError, match=r"policy file .*p\.toml: bad precision policy"):
        load_policy(tmp_path / "p.toml")


def test_policy_for_precedence(tmp_path):
    path = save_policy(make_policy("O3"), tmp_path / "p.toml")
    base = make_policy("O1")
    assert policy_for(path, "O0", base).level == "O3"
    assert policy_for(None, "o0", base) == make_policy("O0")
    assert policy_for(None, None, base) is base
    assert policy_for() == make_policy("O2")
    with pytest.raises(UsageError):
        policy_for(tmp_path / "absent.toml", "O2")


def test_export_policy():
    assert export_policy(make_policy("O0")) == make_policy("O2")
    assert export_policy(make_policy("O1", "bf16")) == Policy("O2", "float16")
    rich = make_policy(**RICH)
    exported = export_policy(rich)
    assert exported == Policy("O2", "float16", rich.fp32_types, rich.fp32_cells, rich.fp16_cells)
    o3 = make_policy("O3", fp32_cells=["x"])
    assert export_policy(o3) == o3


def test_empty_list_key_in_yaml_is_a_usage_error(tmp_path):
    (tmp_path / "p.yaml").write_text("level: O2\nfp32_cells:\n")
    with pytest.raises(UsageError, match="fp32_cells must be a list of strings"):
        load_policy(tmp_path / "p.yaml")


def test_non_iterable_list_value_is_a_usage_error():
    with pytest.raises(UsageError, match="fp32_types must be a list of strings"):
        make_policy("O2", fp32_types=5)
