"""Staged writes: what a writer produces goes into a private staging folder beside its
target (named for this process, so a dead process's is found and removed) and is moved into
place whole (``atomic_path`` for one file, ``atomic_set`` for files naming each other)."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

# MindSpore's writers refuse names outside this set.
_MS_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@_-.:/\\")


def ms_safe(path: str | os.PathLike) -> bool:
    """Whether MindSpore's writers accept ``path`` as a file name."""
    return set(str(path)) <= _MS_SAFE



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
