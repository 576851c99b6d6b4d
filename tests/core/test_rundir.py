"""The run folder: run.json validation, checkpoint finding, and resume merging."""
import json

import pytest

from amptool.documents.door import from_json
from amptool.documents.records import RUN, RunRecord
from amptool.errors import UsageError
from amptool.runs.rundir import RunDir, is_checkpoint_file
from amptool.train.config import TrainConfig
from amptool.train.folder import merge_previous

PREPROCESS = {"height": 8, "width": 8, "channels": 1, "mean": 0.1, "std": 0.3}
POLICY = {"level": "O2", "dtype": "float16", "fp32_types": [], "fp32_cells": [],
          "fp16_cells": []}


def _info(**config) -> dict:
    """run.json as runs before ``schema_version`` wrote it (version 0)."""
    return {"config": config, "policy": POLICY, "data": {"preprocess": PREPROCESS}}


def _record(**config) -> dict:
    """run.json as a run writes it now."""
    return {"schema_version": 1, "config": config, "policy": POLICY,
            "data": {"preprocess": PREPROCESS, "source": "digits", "train_samples": 8,
                     "val_samples": 2, "val_fraction": 0.2, "skipped_files": 0, "augment": []},
            "model": None, "loss": {"name": "mse", "kind": "mse", "targets": ["y"],
                                    "classifier": False},
            "metric": None, "loss_scale": {"kind": "none", "init": 1.0, "factor": 1, "window": 1},
            "versions": {"amptool": "0.1.0"}, "device": "CPU", "seed": 0, "workers": 1}


def _typed(data: dict) -> RunRecord:
    return from_json(RunRecord, data, "run record")


def _usage_line(call) -> str:
    with pytest.raises(UsageError) as err:
        call()
    text = str(err.value)
    assert "\n" not in text
    return text


def test_read_missing_folder(tmp_path):
    text = _usage_line(RunDir(tmp_path / "nope").read)
    assert "run folder" in text and "does not exist" in text and "--out" in text


def test_read_folder_without_run_json(tmp_path):
    assert "has no run.json" in _usage_line(RunDir(tmp_path).read)
    assert RunDir(tmp_path).read_optional() is None
    assert RunDir(tmp_path).previous_config() == {}


def test_read_non_json(tmp_path):
    (tmp_path / "run.json").write_text('{"config": {')
    assert "cannot be read (JSONDecodeError)" in _usage_line(RunDir(tmp_path).read)


def test_read_non_utf8(tmp_path):
    (tmp_path / "run.json").write_bytes(b"\xff\xfe\x00garbage")
    assert "cannot be read" in _usage_line(RunDir(tmp_path).read)


@pytest.mark.parametrize("content,problem", [
    ([1, 2], "run.json is not a JSON object"),
    ({}, "run.json: field 'config' is missing"),
    ({"config": "lenet5"}, "run.json: field 'config' should be an object, got 'lenet5'"),
    ({"config": {"model": "lenet5"}}, "run.json: field 'policy' is missing"),
    ({"config": {"model": "lenet5"}, "policy": "O2"},
     "run.json: field 'policy' should be an object, got 'O2'"),
    ({"config": {"model": "lenet5"}, "policy": POLICY}, "run.json: field 'data' is missing"),
    ({"config": {"model": "lenet5"}, "policy": POLICY, "data": {}},
     "run.json: field 'data.preprocess' is missing"),
    ({"config": {"model": "lenet5"}, "policy": POLICY, "data": {"preprocess": [1]}},
     "run.json: field 'data.preprocess' should be an object, got a list"),
    ({**_info(model="lenet5"), "later": 1}, "run.json: field 'later' is not a key of this"),
    ({**_info(model="lenet5"), "schema_version": 2},
     "run.json: field 'schema_version' is 2, newer than"),
    ({**_info(model="lenet5"), "schema_version": 1}, "run.json: field 'data.source' is missing"),
])
def test_read_malformed(tmp_path, content, problem):
    (tmp_path / "run.json").write_text(json.dumps(content))
    text = _usage_line(RunDir(tmp_path).read)
    assert problem in text and text.startswith(f"run record {tmp_path / 'run.json'}"), text
    assert text.endswith("; upgrade amptool" if "newer" in problem else
                         "; train again into that folder to rewrite it"), text


def test_write_then_read(tmp_path):
    run = RunDir(tmp_path)
    info = _typed(_record(model="lenet5", epochs=2))
    run.write(info)
    back = run.read()
    assert run.has_info() and isinstance(back, RunRecord) and back == info
    assert RUN.json(back) == _record(model="lenet5", epochs=2)
    assert back.settings.model == "lenet5" and back.settings.epochs == 2
    assert back.settings.optimizer is None  # not recorded: None, not TrainConfig's default
    assert back.loss.kind == "mse" and back.data.preprocess.std == 0.3
    assert run.require() is run


def test_a_version_0_record_reads_its_missing_keys_as_none(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(_info(model="lenet5")))
    info = RunDir(tmp_path).read()
    assert info.schema_version is None and info.model is None and info.loss is None
    assert info.data.source is None and info.settings.model == "lenet5"
    assert RunDir(tmp_path).model_reference(info)["model"] == "lenet5"


def test_the_core_reads_only_settings_training_has():
    """``RunSettings`` (what the core reads of run.json's open ``config``) names fields of
    ``TrainConfig``, of the same type, so that a renamed training option is caught here."""
    import dataclasses
    import typing

    from amptool.documents.records import RunSettings

    def plain(kind) -> type:  # Optional[Dict[str, Any]] -> dict
        kind = next((k for k in typing.get_args(kind) if k is not type(None)), kind) \
            if typing.get_origin(kind) is typing.Union else kind
        return typing.get_origin(kind) or kind

    train = typing.get_type_hints(TrainConfig)
    for name, kind in typing.get_type_hints(RunSettings).items():
        assert name in train, f"RunSettings.{name} is no TrainConfig field"
        assert plain(kind) is plain(train[name]), name
    assert {f.name for f in dataclasses.fields(RunSettings)} <= set(train)


def test_previous_config_drops_resume(tmp_path):
    RunDir(tmp_path).write(_typed(_record(model="lenet5", epochs=2, resume=True)))
    assert RunDir(tmp_path).previous_config() == {"model": "lenet5", "epochs": 2}


def _touch(folder, *names):
    for name in names:
        (folder / name).write_bytes(b"x")


def test_find_checkpoint_order(tmp_path):
    run = RunDir(tmp_path)
    _touch(tmp_path, "last.ckpt")
    assert run.find_checkpoint() == tmp_path / "last.ckpt"
    _touch(tmp_path, "best.safetensors")
    assert run.find_checkpoint() == tmp_path / "best.safetensors"
    _touch(tmp_path, "best.ckpt")
    assert run.find_checkpoint() == tmp_path / "best.ckpt"
    assert run.find_checkpoint("best") == tmp_path / "best.ckpt"
    assert run.find_checkpoint("last") == tmp_path / "last.ckpt"


def test_find_checkpoint_last_safetensors(tmp_path):
    _touch(tmp_path, "last.safetensors", "best.ckpt")
    assert RunDir(tmp_path).find_checkpoint("last") == tmp_path / "last.safetensors"


def test_find_checkpoint_errors(tmp_path):
    run = RunDir(tmp_path)
    text = _usage_line(run.find_checkpoint)
    assert "holds no checkpoint (best.ckpt or best.safetensors or last.ckpt or " \
           "last.safetensors)" in text
    assert "(last.ckpt or last.safetensors)" in _usage_line(lambda: run.find_checkpoint("last"))
    _touch(tmp_path, "best.ckpt")
    assert "unknown checkpoint 'worst'" in _usage_line(lambda: run.find_checkpoint("worst"))
    (tmp_path / "last.ckpt").mkdir()   # a folder is not a checkpoint
    assert "holds no checkpoint" in _usage_line(lambda: run.find_checkpoint("last"))


def test_checkpoint_path_naming(tmp_path):
    run = RunDir(tmp_path)
    assert run.checkpoint_path("best") == tmp_path / "best.ckpt"
    assert run.checkpoint_path("last", "safetensors") == tmp_path / "last.safetensors"
    assert run.checkpoint_path("last", "ckpt") == tmp_path / "last.ckpt"
    assert is_checkpoint_file("a/best.safetensors") and not is_checkpoint_file("run.json")


# ---------------------------------------------------------------- merge_previous

@pytest.fixture
def previous_run(tmp_path):
    """A run.json as ``amptool train`` writes it, with several non-default settings."""
    previous = TrainConfig(model="lenet5", epochs=9, lr=0.01, seed=3, batch_size=16,
                           out=str(tmp_path), resume=False)
    RunDir(tmp_path).write(_typed(_record(**previous.to_dict())))
    return tmp_path


def test_merge_replaces_defaults(previous_run):
    cfg = merge_previous(TrainConfig(out=str(previous_run), resume=True))
    assert (cfg.model, cfg.epochs, cfg.lr, cfg.seed, cfg.batch_size) == ("lenet5", 9, 0.01, 3, 16)
    assert cfg.resume is True and cfg.out == str(previous_run)
    assert cfg.optimizer == TrainConfig().optimizer


def test_merge_keeps_explicit_names(previous_run):
    cfg = merge_previous(TrainConfig(out=str(previous_run), resume=True, epochs=5,
                                     model="simplecnn"), explicit={"epochs", "model"})
    assert cfg.epochs == 5 and cfg.model == "simplecnn"   # explicit, even at the default
    assert cfg.lr == 0.01 and cfg.seed == 3


def test_merge_keeps_non_default_values(previous_run):
    cfg = merge_previous(TrainConfig(out=str(previous_run), resume=True, epochs=12, lr=0.5))
    assert cfg.epochs == 12 and cfg.lr == 0.5
    assert cfg.model == "lenet5"


def test_no_resume_unchanged(previous_run):
    cfg = TrainConfig(out=str(previous_run))
    assert merge_previous(cfg) is cfg


def test_resume_without_previous_run(tmp_path):
    cfg = TrainConfig(out=str(tmp_path / "fresh"), resume=True)
    assert merge_previous(cfg) == cfg


def test_resume_runs_a_recorded_model_only_once_vetted(tmp_path):
    """run.json is a file's word: --resume takes its model only as export --run would."""
    for model, message in (("evilpkg.models:build", "from package evilpkg, which is not trusted"),
                           (f"{tmp_path}/evil.py:build", "does not run on a file's word")):
        folder = tmp_path / model.partition(":")[0].replace("/", "_")
        folder.mkdir()
        RunDir(folder).write(_typed(_record(**TrainConfig(model=model,
                                                               out=str(folder)).to_dict())))
        with pytest.raises(UsageError, match=message):
            merge_previous(TrainConfig(out=str(folder), resume=True))
        named = merge_previous(TrainConfig(out=str(folder), resume=True, model="lenet5"),
                               explicit={"model"})
        assert named.model == "lenet5"  # the user's own choice runs as given


def test_a_run_json_without_a_checkpoint_is_no_trained_run(tmp_path):
    """run.json alone (a run killed before its first checkpoint) holds nothing trained: a
    new run replaces it without a flag (``claim_out_folder``); with a checkpoint beside it,
    the folder is a trained run that only --resume or --overwrite may touch."""
    from amptool.train.folder import claim_out_folder

    run = RunDir(tmp_path)
    assert run.trained_files() == [] and run.unfinished_files() == []
    run.write(_typed(_record(model="simplecnn")))
    assert run.trained_files() == [] and run.unfinished_files() == [tmp_path / "run.json"]
    assert claim_out_folder(TrainConfig(out=str(tmp_path))) == [tmp_path / "run.json"]
    (tmp_path / "last.safetensors").write_bytes(b"weights")
    assert run.trained_files() == [tmp_path / "run.json", tmp_path / "last.safetensors"]
    assert run.unfinished_files() == []
    assert "already holds a trained run (run.json, last.safetensors)" in _usage_line(
        lambda: claim_out_folder(TrainConfig(out=str(tmp_path))))
    assert claim_out_folder(TrainConfig(out=str(tmp_path), resume=True)) == []
