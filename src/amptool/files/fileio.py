"""File I/O: atomic file writing (staged by ``amptool.files.staging``, whose names are importable
from here too), output folders held by one writer at a time, line logs written a whole line
at a time, JSON, digests and free space."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import json
import math
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Iterator, Optional

from amptool.errors import UsageError
from amptool.files.staging import (TEMP_PREFIX, atomic_path, atomic_set, current_umask,
                                   drop_own_temps, drop_stale_temps, ms_safe, remove_tree)

__all__ = ["LOCK_NAME", "LineLog", "TEMP_PREFIX", "atomic_path", "atomic_set", "check_out_dir",
           "current_umask", "drop_own_temps", "drop_stale_temps", "ensure_out_dir",
           "free_bytes", "jsonable", "ms_safe", "output_dir", "remove_tree", "sha256",
           "write_bytes", "write_json", "write_text"]


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
        self.fd: Optional[int] = os.open(self.path, flags, 0o666)

    @property
    def closed(self) -> bool:
        return self.fd is None

    def write(self, line: str) -> None:
        if self.fd is None:
            raise ValueError(f"write to {self.path} after it was closed")
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


HASH_CHUNK = 64 << 20
"""Bytes of a file hashed per call. The file is mapped and hashed in place, a chunk a call:
hashlib lets go of the interpreter for the whole call, so a hash beside a thread running
Python keeps its speed (1.3 GB: 0.99 s beside a thread busy in Python, 0.89 s alone; read in
1 MiB chunks it took 13.7 s beside it, each chunk waiting up to the 5 ms switch interval to
take the interpreter back), and each chunk's pages leave the process once hashed, so its
resident memory does not grow with the file."""


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except (OSError, ValueError):  # a file that cannot be mapped: read it
            data = None
        if data is None:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
            return digest.hexdigest()
        with data, memoryview(data) as view:
            for start in range(0, size, HASH_CHUNK):
                digest.update(view[start:start + HASH_CHUNK])
                if hasattr(data, "madvise"):  # the hashed pages leave this process
                    data.madvise(mmap.MADV_DONTNEED, start, min(HASH_CHUNK, size - start))
    return digest.hexdigest()
