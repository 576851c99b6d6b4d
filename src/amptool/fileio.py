"""Atomic file writing: a temp file in the target folder, then ``os.replace``."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import UsageError

# MindSpore's writers refuse names outside this set.
_MS_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@_-.:/\\")


def ensure_out_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` as a writable folder or raise a UsageError naming the fix."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder", "give a folder path")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {out}: {exc.strerror}",
                         "choose a writable --out") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"output folder {out} is not writable", "choose a writable --out")
    return out


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside ``target`` whose name MindSpore accepts; rename on success.

    The temp file lives in a private temp folder inside the target's folder so a
    failure leaves nothing behind. Works over a read-only (mode 0400) existing target.
    """
    target = Path(target)
    parent = target.parent
    tmpdir = Path(tempfile.mkdtemp(prefix=".amptool-tmp-", dir=parent))
    if not set(str(tmpdir)) <= _MS_SAFE:
        # MindSpore refuses spaces and '+' in file names: write somewhere safe, then move.
        os.rmdir(tmpdir)
        tmpdir = Path(tempfile.mkdtemp(prefix="amptool-tmp-"))
    tmp = tmpdir / ("part" + (suffix or target.suffix))
    try:
        yield tmp
        produced = tmp if tmp.exists() else _single_file(tmpdir)
        os.chmod(produced, 0o644)
        try:
            os.replace(produced, target)
        except OSError:  # temp folder on another file system
            import shutil
            shutil.copyfile(produced, str(target) + ".amptool-part")
            os.replace(str(target) + ".amptool-part", target)
    finally:
        import shutil
        shutil.rmtree(tmpdir, ignore_errors=True)


def _single_file(folder: Path) -> Path:
    files = [p for p in folder.iterdir() if p.is_file()]
    if len(files) != 1:
        raise RuntimeError(f"expected one file in {folder}, found {len(files)}")
    return files[0]


def write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


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
