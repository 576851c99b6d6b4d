"""Atomic writes: all or nothing, over read-only targets, and output folders."""
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from amptool.errors import UsageError
from amptool.files.fileio import atomic_path, ensure_out_dir, sha256, write_json, write_text


def _leftovers(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir() if "amptool" in p.name)


class Boom(Exception):
    pass


def test_exception_leaves_nothing_behind(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(Boom), atomic_path(target) as tmp:
        tmp.write_text("half")
        seen = tmp
        raise Boom
    assert not target.exists()
    assert not seen.parent.exists()
    assert _leftovers(tmp_path) == []


def test_exception_keeps_existing_target(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(Boom), atomic_path(target) as tmp:
        tmp.write_text("new")
        raise Boom
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_temp_name_is_beside_target_with_suffix(tmp_path):
    with atomic_path(tmp_path / "w.bin", suffix=".ckpt") as tmp:
        assert tmp.parent.parent == tmp_path and tmp.suffix == ".ckpt"
        tmp.write_bytes(b"\x00\x01")
    assert (tmp_path / "w.bin").read_bytes() == b"\x00\x01"
    assert _leftovers(tmp_path) == []


def test_single_file_produced_under_another_name(tmp_path):
    with atomic_path(tmp_path / "model.mindir") as tmp:
        (tmp.parent / "graph_renamed.mindir").write_text("g")
    assert (tmp_path / "model.mindir").read_text() == "g"


def test_replaces_read_only_target(tmp_path):
    target = tmp_path / "ro.txt"
    target.write_text("old")
    os.chmod(target, 0o400)
    with atomic_path(target) as tmp:
        tmp.write_text("new")
        os.chmod(tmp, 0o400)   # as MindSpore's writers leave their files
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        write_text(tmp_path / "plain.txt", "x")
        with atomic_path(tmp_path / "ms.ckpt") as tmp:
            tmp.write_text("w")
            os.chmod(tmp, 0o400)  # as MindSpore's writers leave their files
        spaced = tmp_path / "a b"
        spaced.mkdir()
        write_text(spaced / "staged.txt", "y")  # staged in the system temp folder
    finally:
        os.umask(old)
    for path in (tmp_path / "plain.txt", tmp_path / "ms.ckpt", spaced / "staged.txt"):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path


def test_a_failed_copy_from_the_system_temp_folder_leaves_nothing(tmp_path, monkeypatch):
    import shutil

    folder = tmp_path / "a b"
    folder.mkdir()

    def broken_replace(src, dst):
        if str(src).startswith(str(folder)):
            raise OSError(28, "No space left on device")
        raise OSError(18, "Invalid cross-device link")  # the move out of the temp folder

    def half_copy(src, dst):
        Path(dst).write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    monkeypatch.setattr(shutil, "copyfile", half_copy)
    with pytest.raises(OSError), atomic_path(folder / "out.txt") as tmp:
        tmp.write_text("whole")
    assert os.listdir(folder) == []


def test_staging_of_a_killed_process_is_cleared_by_the_next_write(tmp_path):
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    stale = tmp_path / f".amptool-tmp-{child.pid}-abcd"
    stale.mkdir()
    (stale / "part.mindir").write_text("half")
    (tmp_path / f".amptool-tmp-{child.pid}-copy").write_text("half")  # a file copied beside
    mine = tmp_path / f".amptool-tmp-{os.getpid()}-live"
    mine.mkdir()  # a live process's staging stays
    write_text(tmp_path / "a.txt", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a.txt", mine.name])


def test_folder_name_mindspore_refuses(tmp_path):
    folder = tmp_path / "with space+plus"
    folder.mkdir()
    with atomic_path(folder / "a.txt") as tmp:
        assert " " not in str(tmp) and "+" not in str(tmp)
        tmp.write_text("ok")
        seen = tmp
    assert (folder / "a.txt").read_text() == "ok"
    assert not seen.parent.exists()
    assert os.listdir(folder) == ["a.txt"]


def test_write_json_and_text(tmp_path):
    write_json(tmp_path / "a.json", {"b": 1, "a": [1, 2], "p": Path("/x/y")})
    text = (tmp_path / "a.json").read_text()
    assert json.loads(text) == {"a": [1, 2], "b": 1, "p": "/x/y"}
    assert text.endswith("}\n") and text.index('"a"') < text.index('"b"')
    write_text(tmp_path / "a.json", "plain")
    assert (tmp_path / "a.json").read_text() == "plain"


def test_sha256(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    assert sha256(tmp_path / "f") == hashlib.sha256(b"abc").hexdigest()


def test_ensure_out_dir(tmp_path):
    made = ensure_out_dir(tmp_path / "a" / "b")
    assert made == tmp_path / "a" / "b" and made.is_dir()
    assert ensure_out_dir(made) == made
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError) as err:
        ensure_out_dir(tmp_path / "file")
    assert "is a file, not a folder" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UsageError, match="cannot create output folder"):
        ensure_out_dir(tmp_path / "file" / "sub")


def test_check_out_dir_refuses_without_creating_anything(tmp_path):
    from amptool.files.fileio import check_out_dir

    check_out_dir(tmp_path / "a" / "b")  # a folder that can be made
    assert not (tmp_path / "a").exists()
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        check_out_dir(tmp_path / "f")
    with pytest.raises(UsageError, match=r"cannot create output folder .*/f/sub: .*/f is a file"):
        check_out_dir(tmp_path / "f" / "sub")


def test_an_output_folder_has_one_writer(tmp_path):
    """A folder held by another process is refused with its holder named; a lock file left
    by a dead one is taken over; the lock file goes when the holder lets go."""
    import fcntl

    from amptool.files.fileio import LOCK_NAME, output_dir

    out = tmp_path / "run"
    out.mkdir()
    other = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # another open file: another holder
    os.write(other, json.dumps({"pid": 4242, "host": os.uname().nodename, "started": 0,
                                "command": "amptool train --out run"}).encode())
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with pytest.raises(UsageError) as err, output_dir(out):
        pass
    assert str(err.value) == (f"output folder {out} is in use by pid 4242 (amptool train --out "
                              "run); wait for it to end, or write to another --out")
    os.close(other)  # as when its holder dies: the file stays, locked by nobody
    with output_dir(out) as held, output_dir(out):  # nested in one process: one lock
        assert json.loads((held / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert list(out.iterdir()) == []


def test_a_failed_body_removes_the_folder_it_created(tmp_path):
    from amptool.files.fileio import output_dir

    with pytest.raises(Boom), output_dir(tmp_path / "new"):
        raise Boom
    assert not (tmp_path / "new").exists()


def test_line_log_appends_whole_lines(tmp_path):
    from amptool.files.fileio import LineLog

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n')
    log = LineLog(path)
    log.write('{"step": 2}\n')
    log.close()
    assert log.closed
    fresh = LineLog(path, append=False)
    fresh.write('{"step": 1}\n')
    fresh.close()
    assert path.read_text() == '{"step": 1}\n'


def test_an_interrupt_during_cleanup_still_removes_the_staging_folder(tmp_path, monkeypatch):
    """Ctrl+C arriving while a failed write's staging folder is removed: the folder goes all
    the same and the interrupt goes on."""
    import shutil

    from amptool.files import fileio

    real, calls = shutil.rmtree, []

    def interrupted_once(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        with fileio.atomic_path(tmp_path / "w.ckpt") as tmp:
            tmp.write_bytes(b"half")
            raise ValueError("write failed")
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []


def test_a_stopped_writer_leaves_no_staging_folder_of_its_own(tmp_path):
    """A staging folder this process made, anywhere under the folder it holds, goes when
    the body stops; another process's live one stays."""
    import os

    from amptool.files import fileio

    theirs = tmp_path / "run" / f"{fileio.TEMP_PREFIX}1-abc"
    (tmp_path / "run").mkdir()
    with pytest.raises(KeyboardInterrupt):
        with fileio.output_dir(tmp_path / "run") as out:
            (out / "sub" / f"{fileio.TEMP_PREFIX}{os.getpid()}-x").mkdir(parents=True)
            theirs.mkdir()
            raise KeyboardInterrupt
    assert theirs.is_dir()
    assert not list((tmp_path / "run").rglob(f"{fileio.TEMP_PREFIX}{os.getpid()}-*"))
