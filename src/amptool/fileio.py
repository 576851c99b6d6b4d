"""Atomic file writing (a temp file in the target folder, then ``os.replace``), output folders
held by one writer at a time, and line logs written a whole line at a time."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator

from .errors import UsageError

# MindSpore's writers refuse names outside this set.
_MS_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@_-.:/\\")


def ms_safe(path: str | os.PathLike) -> bool:
    """Whether MindSpore's writers accept ``path`` as a file name."""
    return set(str(path)) <= _MS_SAFE


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


LOCK_NAME = ".amptool.lock"
"""The lock file of a folder a command is writing (see ``output_dir``)."""

_HELD: dict = {}
"""Folders this process holds (resolved path -> how many ``output_dir`` calls hold it)."""


@contextlib.contextmanager
def output_dir(path: str | os.PathLike) -> Iterator[Path]:
    """``ensure_out_dir``, held by this process until the body ends, however it ends: a
    second writer gets a UsageError naming the holder before it writes anything. The lock
    is ``flock`` on ``LOCK_NAME`` in the folder (removed on release); the kernel drops it
    when its holder dies, so a killed command's lock holds nobody up. Nested calls on one
    folder in one process share the lock. When the body fails, the folder is removed again
    if this call created it and no file was written into it."""
    created = not Path(path).exists()
    out = ensure_out_dir(path)
    key = out.resolve()
    fd, held = None, False
    try:
        if key not in _HELD:
            fd = _lock(out)
        _HELD[key] = _HELD.get(key, 0) + 1
        held = True
        yield out
    except BaseException:
        drop_own_temps(out)
        if held:
            _release(key, out, fd)
            held = False
        if created and out.is_dir() and not any(p.is_file() for p in out.rglob("*")):
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        if held:
            _release(key, out, fd)


def _lock(out: Path):
    """An open descriptor of ``out``'s lock file, locked, naming this process; None where
    the system has no ``flock``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        return None
    path = out / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UsageError(f"output folder {out} is in use by {holder}",
                             "wait for it to end, or write to another --out") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed that file as it let go: lock the one there now
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
          "command": _command_line()}
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps(me) + "\n").encode())
    return fd


def _release(key: Path, out: Path, fd) -> None:
    if _HELD.get(key, 0) > 1:
        _HELD[key] -= 1
        return
    _HELD.pop(key, None)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        if os.stat(out / LOCK_NAME).st_ino == os.fstat(fd).st_ino:
            os.unlink(out / LOCK_NAME)
    os.close(fd)


def _holder(fd) -> str:
    """``pid N (command)`` from a lock file (the host too when it is another)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode())
        pid, command, host = int(info["pid"]), str(info["command"]), str(info["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
    where = "" if host == socket.gethostname() else f" on {host}"
    return f"pid {pid}{where} ({command})"


def _command_line() -> str:
    import shlex
    import sys

    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("amptool", "__main__.py"):
        argv[0] = "amptool"
    return shlex.join(argv)[:300]


class LineLog:
    """A file written a whole line at a time: each ``write`` is one ``os.write`` on an
    ``O_APPEND`` descriptor, and a write cut short (a full disk) is taken back, so the file
    holds whole lines whatever happens."""

    def __init__(self, path: str | os.PathLike, append: bool = True):
        self.path = str(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self.fd = os.open(self.path, flags, 0o666)

    @property
    def closed(self) -> bool:
        return self.fd is None

    def write(self, line: str) -> None:
        data = line.encode("utf-8")
        end = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            done = os.write(self.fd, data)
        except OSError:
            os.ftruncate(self.fd, end)
            raise
        if done != len(data):
            os.ftruncate(self.fd, end)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)

    def flush(self) -> None:
        """Nothing to do: every line is written when given."""

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


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
    tmpdir = _staging_folder(target.parent)
    try:
        tmp = tmpdir / ("part" + (suffix or target.suffix))
        yield tmp
        produced = tmp if tmp.exists() else _single_file(tmpdir)
        os.chmod(produced, 0o666 & ~current_umask())
        try:
            os.replace(produced, target)
        except OSError:  # temp folder on another file system
            _copy_into_place(produced, target)
    finally:
        remove_tree(tmpdir)


def _staging_folder(parent: Path) -> Path:
    """A new private folder for staged writes: in ``parent`` (named for this process, so
    ``drop_stale_temps`` and ``drop_own_temps`` find it) when MindSpore accepts that path,
    else in the system temp folder. Stale ones of dead processes in ``parent`` go first."""
    drop_stale_temps(parent)
    folder = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=parent))
    if set(str(folder)) <= _MS_SAFE:
        return folder
    os.rmdir(folder)
    return Path(tempfile.mkdtemp(prefix="amptool-tmp-"))


@contextlib.contextmanager
def atomic_set(folder: str | os.PathLike, replaces=()) -> Iterator[Path]:
    """Yield a private staging folder whose entries (files and folders, named as they are
    to be named in ``folder``) are moved into ``folder`` together on success: for a writer
    whose output is several files naming each other (a graph and its weights folder).
    ``replaces``: names in ``folder`` that the set supersedes (another form of the same
    artefact), removed once the set is in place. A failure leaves nothing in ``folder``.
    The staging folder's name is one MindSpore accepts (else it is in the system temp
    folder, and entries are copied beside their targets under temp names, then renamed)."""
    folder = Path(folder)
    stage = _staging_folder(folder)
    try:
        yield stage
        entries = sorted(stage.iterdir(), key=lambda p: p.is_file())  # folders first
        if not entries:
            raise RuntimeError(f"nothing was written into {stage}")
        for entry in entries:
            _make_readable(entry)
            _move_into(entry, folder / entry.name)
        for name in replaces:
            old = folder / name
            if old.is_dir() and not old.is_symlink():
                remove_tree(old)
            elif old.exists() or old.is_symlink():
                old.unlink()
    finally:
        remove_tree(stage)


def _make_readable(entry: Path) -> None:
    """Files get the mode a new file gets under the umask, folders a new folder's (MindSpore
    writes them 0400 and 0700)."""
    mask = current_umask()
    paths = [entry, *entry.rglob("*")] if entry.is_dir() else [entry]
    for p in paths:
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def _move_into(entry: Path, target: Path) -> None:
    """``entry`` onto ``target`` (a file or a folder), replacing what is there."""
    if entry.is_file():
        try:
            os.replace(entry, target)
        except OSError:  # staging folder on another file system
            _copy_into_place(entry, target)
        return
    # named as a staging folder: removed by ``drop_stale_temps`` if this process dies here
    part = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=target.parent))
    try:
        placed = part / "d"
        try:
            os.rename(entry, placed)
        except OSError:
            shutil.copytree(entry, placed)
        if target.exists() or target.is_symlink():
            os.rename(target, part / "old")  # removed with ``part``
        os.rename(placed, target)
    finally:
        remove_tree(part)


def remove_tree(path: Path) -> None:
    """``shutil.rmtree`` run to its end even when an interrupt (Ctrl+C, SIGTERM) arrives
    while it works; the interrupt is raised again once the tree is gone."""
    pending = None
    while True:
        try:
            shutil.rmtree(path, ignore_errors=True)
            break
        except KeyboardInterrupt as stop:
            pending = stop
    if pending is not None:
        raise pending


def drop_own_temps(folder: Path) -> None:
    """Remove the staging folders this process left anywhere under ``folder`` (an interrupt
    that arrived between creating one and entering the code that removes it)."""
    for mine in list(folder.rglob(f"{TEMP_PREFIX}{os.getpid()}-*")):
        remove_tree(mine)


TEMP_PREFIX = ".amptool-tmp-"
"""Staging folders: ``.amptool-tmp-<pid>-<random>`` beside the target."""


def drop_stale_temps(folder: Path) -> None:
    """Remove staging folders (and files copied beside their targets) left in ``folder`` by
    a process that no longer runs (killed with SIGKILL, say): what it was writing never
    reached its final name."""
    for stale in folder.glob(f"{TEMP_PREFIX}*"):
        pid = stale.name[len(TEMP_PREFIX):].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


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
    # named as a staging folder is: removed by ``drop_stale_temps`` if this process dies here
    fd, part = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=target.parent)
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


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes free to this user on ``folder``'s file system (None where it cannot be told)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
