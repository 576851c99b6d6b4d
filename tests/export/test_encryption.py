"""Encrypted MindIR: round trip with the right key, one clean line for a wrong or missing one."""
from __future__ import annotations

import secrets

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.artefact.runners import load_runner
from amptool.cli import app
from amptool.errors import UsageError

pytestmark = pytest.mark.slow  # trains or exports real networks

cli = CliRunner()


@pytest.fixture(scope="module")
def encrypted(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("enc")
    key_hex = secrets.token_hex(16)
    key_file = out / "key.txt"
    key_file.write_text(key_hex + "\n")
    res = cli.invoke(app, ["export", "--run", str(runs.get("simplecnn")), "--precision", "fp16",
                           "--dynamic-batch", "--encrypt-key-file", str(key_file),
                           "--out", str(out / "art")])
    assert res.exit_code == 0, res.output
    return out / "art" / "simplecnn_fp16.mindir", key_hex, res.output


def test_round_trip(encrypted, exports, references):
    path, key_hex, output = encrypted
    x, _, _ = references("simplecnn")
    plain = load_runner(exports.get("simplecnn")[("MINDIR", "fp16")].path).run([x[:16]])[0]
    runner = load_runner(path, key=bytes.fromhex(key_hex))
    assert runner.manifest.encrypted is True and runner.precision == "fp16"
    np.testing.assert_array_equal(runner.run([x[:16]])[0], plain)
    assert load_runner(path, key=key_hex).run([x[:2]])[0].shape == (2, 10)  # hex text works too


def test_key_never_written_or_printed(encrypted):
    path, key_hex, output = encrypted
    manifest_text = path.with_name(path.name + ".json").read_text()
    raw = bytes.fromhex(key_hex)
    for text in (manifest_text, output):
        assert key_hex not in text.lower() and raw.hex() not in text
    assert raw not in path.with_name(path.name + ".json").read_bytes()


def test_wrong_or_missing_key(encrypted, monkeypatch):
    path, key_hex, _ = encrypted
    monkeypatch.delenv("AMPTOOL_MINDIR_KEY", raising=False)
    with pytest.raises(UsageError, match="wrong key"):
        load_runner(path, key=secrets.token_hex(16))
    with pytest.raises(UsageError, match="encrypted MindIR"):
        load_runner(path)
    res = cli.invoke(app, ["inspect", str(path)])
    assert res.exit_code == 0 and "encrypted" in res.output
    wrong = path.parent / "wrong.key"
    wrong.write_text(secrets.token_hex(16))
    res = cli.invoke(app, ["inspect", str(path), "--key-file", str(wrong)])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "wrong key" in res.output \
        and "Traceback" not in res.output
    monkeypatch.setenv("AMPTOOL_MINDIR_KEY", key_hex)  # the runner's default variable
    assert load_runner(path).run([np.zeros((1, 1, 28, 28), np.float32)])[0].shape == (1, 10)
    res = cli.invoke(app, ["inspect", str(path), "--json"])
    assert res.exit_code == 0 and '"readable": true' in res.output


def test_key_from_environment_and_bad_keys(runs, tmp_path, monkeypatch):
    run = str(runs.get("simplecnn"))
    monkeypatch.setenv("MY_MODEL_KEY", secrets.token_hex(32))
    res = cli.invoke(app, ["export", "--run", run, "--precision", "fp32", "--encrypt-key-env",
                           "MY_MODEL_KEY", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "encrypted" in res.output
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    cases = [
        (["--encrypt-key-file", str(bad)], "valid AES-GCM key"),
        (["--encrypt-key-file", str(tmp_path / "missing.key")], "does not exist"),
        (["--encrypt-key-env", "NO_SUCH_VAR_HERE"], "is not set"),
        (["--encrypt-key-env", "MY_MODEL_KEY", "-f", "ONNX"], "MINDIR only"),
    ]
    for extra, message in cases:
        res = cli.invoke(app, ["export", "--run", run, "--out", str(tmp_path / "b"), *extra])
        assert res.exit_code == 2 and message in res.output, (extra, res.output)
        assert res.output.count("\n") == 1
    assert not (tmp_path / "b").exists()


def test_the_provenance_of_an_encrypted_mindir_needs_its_key(encrypted):
    from amptool.artefact.audit import audit_artefact
    from amptool.artefact.provenance import read_provenance

    path, key_hex, _ = encrypted
    found = read_provenance(path, bytes.fromhex(key_hex))
    assert found is not None and found.precision == "fp16" and found.format == "MINDIR"
    assert audit_artefact(path, bytes.fromhex(key_hex)).findings == []
    with pytest.raises(UsageError, match="encrypted MindIR"):
        read_provenance(path)
    with pytest.raises(UsageError, match="wrong key"):
        read_provenance(path, bytes.fromhex(secrets.token_hex(16)))
