"""Atomic file writing: a temp file in the target folder, then ``os.replace``."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import UsageError

# MindSpore's writers refuse names outside this set.
_MS_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@_-.:/\\")


def check_out_dir(path: str | os.PathLike) -> None:
    """The refusals of ``ensure_out_dir`` that need nothing created: for a command that
    works long before it writes, so a bad ``--out`` costs no time."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder", "give a folder path")
    found = out
    while not found.exists() and found != found.parent:
        found = found.parent
    if not found.is_dir():
        raise UsageError(f"cannot create output folder {out}: {found} is a file",
                         "choose a writable --out")
    if not os.access(found, os.W_OK | os.X_OK):
        if found == out:
            raise UsageError(f"output folder {out} is not writable", "choose a writable --out")
        raise UsageError(f"cannot create output folder {out}: {found} is not writable",
                         "choose a writable --out")


def ensure_out_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` as a writable folder or raise a UsageError naming the fix."""
    out = Path(path)
    check_out_dir(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {out}: {exc.strerror}",
                         "choose a writable --out") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"output folder {out} is not writable", "choose a writable --out")
    return out


@contextlib.contextmanager
def output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """``ensure_out_dir``; when the body fails, the folder is removed again if this call
    created it and no file was written into it."""
    created = not Path(path).exists()
    out = ensure_out_dir(path)
    try:
        yield out
    except BaseException:
        if created and not any(p.is_file() for p in out.rglob("*")):
            shutil.rmtree(out, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path whose name MindSpore accepts; move it onto ``target`` on success.

    The temp file lives in a private temp folder inside the target's folder, so a failure
    leaves nothing behind. When the target's folder has characters MindSpore refuses in
    file names (spaces, '+'), the file is written in the system temp folder, copied beside
    the target under a temp name and renamed (removed again if the copy fails). The file
    gets the mode a new file gets under the umask (MindSpore writes some read-only); this
    works over a read-only (mode 0400) existing target.
    """
    target = Path(target)
    parent = target.parent
    drop_stale_temps(parent)
    tmpdir = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=parent))
    if not set(str(tmpdir)) <= _MS_SAFE:
        os.rmdir(tmpdir)
        tmpdir = Path(tempfile.mkdtemp(prefix="amptool-tmp-"))
    tmp = tmpdir / ("part" + (suffix or target.suffix))
    try:
        yield tmp
        produced = tmp if tmp.exists() else _single_file(tmpdir)
        os.chmod(produced, 0o666 & ~current_umask())
        try:
            os.replace(produced, target)
        except OSError:  # temp folder on another file system
            _copy_into_place(produced, target)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


TEMP_PREFIX = ".amptool-tmp-"
"""Staging folders: ``.amptool-tmp-<pid>-<random>`` beside the target."""


def drop_stale_temps(folder: Path) -> None:
    """Remove staging folders left in ``folder`` by a process that no longer runs (killed
    with SIGKILL, say): what it was writing never reached its final name."""
    for stale in folder.glob(f"{TEMP_PREFIX}*"):
        pid = stale.name[len(TEMP_PREFIX):].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _copy_into_place(produced: Path, target: Path) -> None:
    fd, part = tempfile.mkstemp(prefix=".amptool-part-", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(produced, part)
        os.chmod(part, 0o666 & ~current_umask())
        os.replace(part, target)
    except BaseException:
        Path(part).unlink(missing_ok=True)
        raise


def _single_file(folder: Path) -> Path:
    files = [p for p in folder.iterdir() if p.is_file()]
    if len(files) != 1:
        raise RuntimeError(f"expected one file in {folder}, found {len(files)}")
    return files[0]


def write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(target: str | os.PathLike, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def write_json(target: str | os.PathLike, obj) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def jsonable(obj):
    """``obj`` with NaN/Inf floats as strings, so the JSON written is valid everywhere."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
