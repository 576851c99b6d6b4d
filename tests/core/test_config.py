"""Config files (YAML/TOML/JSON) into frozen dataclasses: defaults <- file <- overrides."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from amptool.errors import UsageError
from amptool.files.configfile import build_config, read_config_file
from amptool.train.config import TrainConfig

EXPECTED = {"model": "lenet5", "epochs": 3, "lr": 0.01, "resume": True, "tags": ["a", "b"]}
TEXTS = {
    ".yaml": "model: lenet5\nepochs: 3\nlr: 0.01\nresume: true\ntags: [a, b]\n",
    ".yml": "model: lenet5\nepochs: 3\nlr: 0.01\nresume: true\ntags:\n  - a\n  - b\n",
    ".toml": 'model = "lenet5"\nepochs = 3\nlr = 0.01\nresume = true\ntags = ["a", "b"]\n',
    ".json": '{"model": "lenet5", "epochs": 3, "lr": 0.01, "resume": true, "tags": ["a", "b"]}',
}


@pytest.mark.parametrize("suffix", sorted(TEXTS))
def test_read_each_format(tmp_path, suffix):
    path = tmp_path / f"cfg{suffix}"
    path.write_text(TEXTS[suffix])
    assert read_config_file(path) == EXPECTED
    upper = tmp_path / f"CFG{suffix.upper()}"
    upper.write_text(TEXTS[suffix])
    assert read_config_file(upper) == EXPECTED


def test_empty_yaml_is_empty_mapping(tmp_path):
    (tmp_path / "c.yaml").write_text("# nothing yet\n")
    assert read_config_file(tmp_path / "c.yaml") == {}


@pytest.mark.parametrize("suffix,text", [
    (".yaml", "model: [unclosed\n"),
    (".toml", "model = \n"),
    (".json", '{"model": "x",}'),
    (".toml", "a = 1\na = 2\n"),
])
def test_malformed_file(tmp_path, suffix, text):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        read_config_file(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"config file {path} is malformed" in msg and msg.endswith("fix its syntax")


@pytest.mark.parametrize("suffix,text", [(".yaml", "- a\n- b\n"), (".json", "[1, 2]"),
                                         (".json", '"text"'), (".yaml", "42\n")])
def test_non_mapping(tmp_path, suffix, text):
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    with pytest.raises(UsageError, match="must hold a mapping"):
        read_config_file(path)


def test_unknown_extension_and_missing_file(tmp_path):
    (tmp_path / "c.ini").write_text("[a]\nb=1\n")
    with pytest.raises(UsageError, match=r"unknown extension '\.ini'"):
        read_config_file(tmp_path / "c.ini")
    with pytest.raises(UsageError, match="does not exist"):
        read_config_file(tmp_path / "absent.yaml")


@dataclass(frozen=True)
class Demo:
    name: str = "x"
    count: int = 1
    rate: float = 0.5
    flag: bool = False
    items: tuple = ()
    extra: str | None = None


def test_build_config_layers():
    cfg = build_config(Demo, {"count": 4, "rate": 2, "items": ["a"], "extra": "e"},
                       {"count": 9, "rate": None, "flag": True})
    assert cfg == Demo(name="x", count=9, rate=2.0, flag=True, items=("a",), extra="e")
    assert isinstance(cfg.rate, float) and isinstance(cfg.items, tuple)
    assert build_config(Demo) == Demo()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.count = 3


def test_build_config_dashes_and_whole_floats():
    cfg = build_config(TrainConfig, {"batch-size": 8, "epochs": 4.0, "scale-init": 1024})
    assert cfg.batch_size == 8 and cfg.epochs == 4 and isinstance(cfg.epochs, int)
    assert cfg.scale_init == 1024.0 and isinstance(cfg.scale_init, float)
    assert cfg.model == TrainConfig().model


def test_build_config_reports_everything_at_once():
    with pytest.raises(UsageError) as err:
        build_config(TrainConfig, {"epoch": 3, "bogus": 1, "batch_size": "big", "resume": "yes",
                                   "lr": 0.1}, source="train.yaml")
    text = str(err.value)
    assert "\n" not in text and text.startswith("train.yaml: ")
    for part in ("unknown key 'epoch'", "unknown key 'bogus'",
                 "batch_size must be a number, got 'big'",
                 "resume must be true or false, got 'yes'"):
        assert part in text
    assert "known keys: " in text and "batch_size" in text.split("known keys: ")[1]


@pytest.mark.parametrize("values,needle", [
    ({"count": 2.5}, "count must be a whole number, got 2.5"),
    ({"count": True}, "count must be a number, got True"),
    ({"rate": "fast"}, "rate must be a number, got 'fast'"),
    ({"flag": 1}, "flag must be true or false, got 1"),
    ({"items": "a,b"}, "items must be a list, got 'a,b'"),
    ({"name": 5}, "name must be a string, got 5"),
])
def test_type_coercion_errors(values, needle):
    with pytest.raises(UsageError) as err:
        build_config(Demo, values)
    assert needle in str(err.value)


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_whole_number_is_a_usage_error(value):
    with pytest.raises(UsageError, match="epochs must be a whole number"):
        build_config(TrainConfig, {"epochs": value})
