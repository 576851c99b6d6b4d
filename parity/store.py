"""Arrays on disk, written batch by batch and read back by rows, never held whole.

A ``Spool`` writes one ``.npy`` file an array, batch by batch (the header first, sized by
the sample count announced), and reads rows back with a plain read at their offset, so a
reader's memory is the rows it asked for. ``StoredArray`` is where such an array lies: an
``.npy`` file, or a member of an uncompressed ``.npz`` (what ``numpy.savez`` writes: its
members are ``.npy`` files stored as they are) found through the zip's local header.
``stored_npz`` opens every member of an ``.npz`` so; ``write_npz`` writes one from arrays
and ``.npy`` files, copying each in chunks into a stored (uncompressed, zip64) member.
"""
from __future__ import annotations

import mmap
import os
import shutil
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

COPY_BYTES = 16 << 20
"""Bytes copied at a time into an .npz member."""


@dataclass(frozen=True)
class StoredArray:
    """An array in a file: its dtype and shape, C order, from byte ``offset``."""

    path: str
    offset: int
    dtype: np.dtype
    shape: tuple

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` read into a fresh array."""
        n = max(0, min(stop, len(self)) - start)
        values = n * int(np.prod(self.shape[1:], dtype=np.int64))
        with open(self.path, "rb") as fh:
            fh.seek(self.offset + start * self.row_bytes)
            data = np.fromfile(fh, dtype=self.dtype, count=values)
        return data.reshape((n,) + tuple(self.shape[1:]))

    def file(self) -> Optional[Path]:
        """The .npy file that is this array, header to end (None: it lies in another file)."""
        whole = self.path.endswith(".npy") and stored_at(self.path) == self
        return Path(self.path) if whole else None

    def memmap(self) -> np.ndarray:
        """The whole array, memory-mapped read-only (pages read as they are touched)."""
        if not self.shape or 0 in self.shape:
            return np.zeros(self.shape, dtype=self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset,
                         shape=self.shape)


def release_pages(array) -> None:
    """Let the kernel drop the pages of a memory-mapped array that reading it made resident
    (file pages, read again when touched): a memory-mapped array read batch by batch then
    holds no more memory than a batch. Other arrays are left as they are."""
    mapped = getattr(array, "_mmap", None)
    if isinstance(mapped, mmap.mmap) and hasattr(mapped, "madvise"):
        mapped.madvise(mmap.MADV_DONTNEED)


def _npy_header(fh) -> tuple:
    """(dtype, shape, fortran) of the .npy header at the file's position."""
    version = np.lib.format.read_magic(fh)
    read = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f"unsupported .npy version {version}")
    shape, fortran, dtype = read(fh)
    return dtype, tuple(shape), fortran


def stored_at(path: str, offset: int = 0) -> Optional[StoredArray]:
    """The .npy array at ``offset`` of ``path``; None when it cannot be read in place
    (Fortran order, or objects)."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        dtype, shape, fortran = _npy_header(fh)
        start = fh.tell()
    if dtype.hasobject or (fortran and len(shape) > 1):
        return None
    return StoredArray(str(path), start, dtype, shape)


def _member_offset(path: str, info: zipfile.ZipInfo) -> int:
    """Where a stored member's bytes start: after its local header, name and extra field."""
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        local = fh.read(30)
    if local[:4] != b"PK\x03\x04":
        raise ValueError(f"no local header for {info.filename}")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    return info.header_offset + 30 + name_len + extra_len


def stored_npz(path: str) -> dict:
    """name -> StoredArray (or, for a compressed or Fortran-ordered member, the array read
    whole) of every ``.npy`` member of an .npz."""
    found = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[:-4]
            stored = None
            if info.compress_type == zipfile.ZIP_STORED:
                stored = stored_at(path, _member_offset(path, info))
            if stored is None:
                with zf.open(info) as fh:
                    stored = np.lib.format.read_array(fh, allow_pickle=False)
            found[name] = stored
    return found


def _write_array(fh, array) -> None:
    array = np.asarray(array)
    header = np.lib.format.header_data_from_array_1_0(array)
    header["fortran_order"] = False
    np.lib.format.write_array_header_2_0(fh, header)
    if array.ndim == 0:
        fh.write(array.tobytes())
        return
    row = max(1, array[:1].nbytes)
    step = max(1, COPY_BYTES // row)
    for start in range(0, len(array), step):
        fh.write(np.ascontiguousarray(array[start:start + step]).tobytes())


def write_npz(path: str, members: dict) -> None:
    """An uncompressed .npz (readable by ``numpy.load``) of name -> array or ``.npy`` file
    (a ``Path``, copied as it is), each written in chunks."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in members.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                if isinstance(value, Path):
                    with open(value, "rb") as src:
                        shutil.copyfileobj(src, fh, COPY_BYTES)
                else:
                    _write_array(fh, value)


class Spool:
    """Arrays of ``count`` rows each, written batch by batch as ``.npy`` files of ``folder``;
    mutable. ``append`` takes one batch of every array (in order); ``arrays`` reads them."""

    def __init__(self, folder: Path, count: int, prefix: str = "output",
                 span: Optional[tuple] = None) -> None:
        self.folder, self.count, self.prefix = Path(folder), int(count), prefix
        self.start, self.stop = span or (0, self.count)
        """Rows written here: a shard's; several shards write one file, each its rows."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.files: list = []
        self.written = 0

    def path(self, index: int) -> Path:
        return self.folder / f"{self.prefix}_{index}.npy"

    def append(self, batch: list) -> None:
        if not self.files:
            self.files = [self._open(i, np.asarray(b)) for i, b in enumerate(batch)]
        for fh, part in zip(self.files, batch):
            fh.write(np.ascontiguousarray(part).tobytes())
        self.written += len(batch[0]) if batch else 0

    def _open(self, index: int, first: np.ndarray):
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if self.span_is_whole else 0)
        fh = os.fdopen(os.open(self.path(index), flags, 0o600), "r+b")
        header = {"descr": np.lib.format.dtype_to_descr(first.dtype), "fortran_order": False,
                  "shape": (self.count,) + tuple(first.shape[1:])}
        np.lib.format.write_array_header_2_0(fh, header)
        row = int(np.prod(first.shape[1:], dtype=np.int64)) * first.dtype.itemsize
        fh.seek(fh.tell() + self.start * row)
        return fh

    @property
    def span_is_whole(self) -> bool:
        return (self.start, self.stop) == (0, self.count)

    def close(self) -> list:
        """The arrays written (``StoredArray`` each); their rows must be all ``count``."""
        for fh in self.files:
            fh.close()
        if self.written != self.stop - self.start:
            raise RuntimeError(f"spooled {self.written} rows, {self.stop - self.start} announced")
        return [stored_at(str(self.path(i))) for i in range(len(self.files))]
