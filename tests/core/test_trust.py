"""The trust store: code a user named is remembered by sha256; recorded code runs only then."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from amptool.errors import UsageError
from amptool.network.trust import (STORE_ENV, is_trusted, read_store, recorded_reference,
                                   store_path, trust_code, trust_folder, vet_recorded)

MODEL = ("from mindspore import nn\n\n\ndef build():\n"
         "    return nn.SequentialCell([nn.Flatten(), nn.Dense(4, 3)])\n\n\n"
         "build.input_shape = (1, 2, 2)\nbuild.num_classes = 3\n")


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "home" / "trusted.json"
    monkeypatch.setenv(STORE_ENV, str(path))
    return path


def test_the_store_lives_with_the_user(monkeypatch, tmp_path):
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "mine.json"))
    assert store_path() == tmp_path / "mine.json"
    monkeypatch.delenv(STORE_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert store_path() == tmp_path / "cfg" / "amptool" / "trusted.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert store_path() == tmp_path / "me" / ".config" / "amptool" / "trusted.json"


def test_code_is_recorded_and_looked_up_by_sha256(store, tmp_path):
    assert read_store() == {} and not store.exists()  # no store yet: nothing trusted
    file = tmp_path / "net.py"
    file.write_text(MODEL)
    trust_code("a" * 64, file, "--model")
    trust_code("a" * 64, file, "--model")  # once is enough
    entries = read_store()
    assert list(entries) == ["a" * 64]
    assert entries["a" * 64]["file"] == str(file.resolve()) \
        and entries["a" * 64]["how"] == "--model"
    assert is_trusted("a" * 64) and not is_trusted("b" * 64)
    assert json.loads(store.read_text())["version"] == 1


@pytest.mark.parametrize("text", ["{not json", "[]", '{"sha256": []}', '{"sha256": {"x": 1}}',
                                  '"text"', "{}"])
def test_a_corrupt_store_is_one_line(store, text):
    store.parent.mkdir(parents=True)
    store.write_text(text)
    for action in (lambda: is_trusted("a" * 64), lambda: trust_code("a" * 64, store, "--model")):
        with pytest.raises(UsageError) as info:
            action()
        line = str(info.value)
        assert f"the trust store {store} is corrupt" in line and "delete it" in line
        assert "\n" not in line
    assert store.read_text() == text  # never overwritten


def test_an_unwritable_store_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(STORE_ENV, str(blocker / "trusted.json"))  # its folder is a file
    with pytest.raises(UsageError, match=f"cannot (read|write) the trust store .*{STORE_ENV}"):
        trust_code("a" * 64, blocker, "--model")


def test_concurrent_writers_keep_every_entry(store):
    code = ("import sys\nfrom amptool.network.trust import trust_code\n"
            "for i in range(15):\n"
            "    trust_code(f'{sys.argv[1]}{i:02d}'.ljust(64, '0'), sys.argv[0], 'test')\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"w{n}"]) for n in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    assert len(read_store()) == 60


def _folder(tmp_path, name: str) -> tuple:
    """A folder made elsewhere: a kept model copy and the reference its record holds."""
    folder = tmp_path / name
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "net.py").write_text(MODEL)
    from amptool.files.fileio import sha256

    kept = {"file": "model/net.py", "sha256": sha256(folder / "model" / "net.py")}
    ref = recorded_reference({"model": "/far/away/net.py:build"}, kept, folder / "run.json",
                             folder)
    return folder, ref


def test_a_folder_made_elsewhere_runs_only_after_consent(store, tmp_path):
    folder, ref = _folder(tmp_path, "downloaded")
    with pytest.raises(UsageError) as info:
        vet_recorded(ref)
    line = str(info.value)
    assert "is not code you have trusted on this machine" in line
    assert f"pass --trust-model {folder} if you trust it, or --model" in line
    assert trust_folder(folder) == [folder / "model" / "net.py"]
    assert vet_recorded(ref)["model"] == f"{(folder / 'model' / 'net.py').resolve()}:build"
    assert read_store()[ref["sha256"]]["how"] == f"--trust-model {folder}"


def test_an_edited_copy_with_a_rewritten_hash_is_refused(store, tmp_path):
    from amptool.files.fileio import sha256

    folder, ref = _folder(tmp_path, "mine")
    trust_folder(folder)
    copy = folder / "model" / "net.py"
    copy.write_text("import os\n" + MODEL)
    with pytest.raises(UsageError, match="does not match the recorded sha256"):
        vet_recorded(ref)
    with pytest.raises(UsageError, match="is not code you have trusted on this machine"):
        vet_recorded(dict(ref, sha256=sha256(copy)))


def test_trust_folder_needs_a_kept_model_file(store, tmp_path):
    with pytest.raises(UsageError, match=r"--trust-model .* keeps no model file \(model/\*\.py\)"):
        trust_folder(tmp_path)
    assert not store.exists()


def test_samples_and_trusted_packages_need_no_consent(store, tmp_path):
    def recorded(model):
        return recorded_reference({"model": model}, None, tmp_path / "run.json", tmp_path)

    assert vet_recorded(recorded("simplecnn"))["model"] == "simplecnn"
    assert vet_recorded(recorded("mindcv.models.resnet:resnet18"))["model"] == \
        "mindcv.models.resnet:resnet18"
    assert not store.exists()  # vetting never writes


def test_a_model_the_user_names_is_remembered(store, tmp_path):
    from amptool.files.fileio import sha256
    from amptool.network.models import resolve_model
    from amptool.network.trust import keep_model_file

    file = tmp_path / "net.py"
    file.write_text(MODEL)
    spec = resolve_model(f"{file}:build")
    assert is_trusted(sha256(file))
    run = tmp_path / "run"
    kept = keep_model_file(spec, run)
    ref = recorded_reference({"model": f"{file}:build"}, kept, run / "run.json", run)
    assert vet_recorded(ref)["model"] == f"{(run / 'model' / 'net.py').resolve()}:build"


def test_a_corrupt_store_stops_a_command_with_one_line(store, tmp_path):
    from typer.testing import CliRunner

    from amptool.cli import app

    store.parent.mkdir(parents=True)
    store.write_text("{not json")
    (tmp_path / "net.py").write_text(MODEL)
    result = CliRunner().invoke(app, ["convert", "policy", "--model", f"{tmp_path}/net.py:build"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"amptool: error: the trust store {store} is corrupt")
