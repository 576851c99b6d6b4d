"""One way to layer a config file under flags, for every command and the Python API."""
import pytest

from amptool.errors import UsageError
from amptool.parity.config import ParityConfig
from amptool.pipeline import PipelineConfig
from amptool.train.config import TrainConfig


def test_the_python_api_loads_each_commands_config_file(tmp_path):
    parity = tmp_path / "parity.toml"
    parity.write_text("samples = 200\nper_layer = true\n[thresholds]\nmin_top1 = 0.98\n"
                      "[thresholds.outputs.logits]\nmin_cosine = 0.9999\n")
    cfg = ParityConfig.from_file(parity, ["ref.mindir", "a.mindir", "b.onnx"], samples=50)
    assert (cfg.reference, cfg.candidates) == ("ref.mindir", ("a.mindir", "b.onnx"))
    assert cfg.samples == 50 and cfg.per_layer  # flags over the file, the file over defaults
    assert cfg.file_thresholds["outputs"]["logits"] == {"min_cosine": 0.9999}
    train = tmp_path / "train.yaml"
    train.write_text("model: lenet5\nepochs: 3\nquiet: true\n")  # quiet: a launch option
    assert TrainConfig.from_file(train, epochs=None, lr=0.01) == TrainConfig(
        model="lenet5", epochs=3, lr=0.01)
    run = tmp_path / "run.json"
    run.write_text('{"model": "lenet5", "samples": 64, "onnx": "off"}')
    pipeline = PipelineConfig.from_file(run, out="runs/x")
    assert (pipeline.samples, pipeline.onnx, pipeline.out) == (64, "off", "runs/x")
    assert pipeline.train.model == "lenet5"
    assert ParityConfig.from_file(None, ["r", "c"]).samples is None  # no file: defaults


def test_every_bad_key_of_a_file_is_named_at_once(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("sample = 3\nper_layers = true\n")
    with pytest.raises(UsageError, match=f"config {bad}: unknown key 'sample'; unknown key "
                                         "'per_layers'"):
        ParityConfig.from_file(bad, ["r", "c"])
    with pytest.raises(UsageError, match="unknown key 'epoch'"):
        TrainConfig.from_file(_write(tmp_path / "t.yaml", "epoch: 3\n"))
    with pytest.raises(UsageError, match="no artefact to check"):
        ParityConfig.from_file(None, [])


def _write(path, text):
    path.write_text(text)
    return path


def test_a_pipeline_config_writes_every_setting_it_holds():
    """summary.json's ``config`` names every setting of the run, the gate's (workers, ledger,
    label, baseline, regression) included; a ledger's password is not written."""
    import dataclasses

    cfg = PipelineConfig(workers=2, ledger="l.db", label="v1", baseline="runs/main")
    written = cfg.to_dict()
    assert set(written) == {f.name for f in dataclasses.fields(PipelineConfig)}
    assert (written["workers"], written["ledger"], written["label"], written["baseline"]) == (
        2, "l.db", "v1", "runs/main")
    assert written["regression"] == cfg.regression.to_dict()
    team = PipelineConfig(ledger="postgresql+psycopg://ci:s3cret@db.example/ledger").to_dict()
    assert team["ledger"] == "postgresql+psycopg://ci:***@db.example/ledger"
