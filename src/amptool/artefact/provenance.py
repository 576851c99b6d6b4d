"""Provenance read from the artefact itself: ``read_provenance(path) -> Optional[Provenance]``.

amptool writes one entry, key ``PROVENANCE_KEY``, into every MindIR (``ModelProto.user_info``)
and ONNX file (``ModelProto.metadata_props``) it exports; its value is a ``Provenance``
document (``amptool.documents.provenance``). Both formats keep that map as field 14 of their
top-level ``ModelProto``, an entry being a message of key (1) and value (2), so one reader
serves both: it walks the file's top-level fields (``amptool.files.protowire``) without
parsing the graph or reading a weight, and needs neither MindSpore nor onnx, except to
decrypt an encrypted MindIR.
"""
from __future__ import annotations

import mmap
from pathlib import Path
from typing import Optional

from amptool.artefact.common import unreadable
from amptool.artefact.files import locate
from amptool.artefact.mindir import decrypted_bytes, is_encrypted
from amptool.documents.provenance import PROVENANCE_KEY, Provenance, parse_provenance
from amptool.errors import UsageError
from amptool.files.protowire import WireError, fields

__all__ = ["PROVENANCE_KEY", "Provenance", "read_provenance", "NO_PROVENANCE"]

GRAPH, ENTRIES, KEY, VALUE = 7, 14, 1, 2
"""Field numbers: ``ModelProto.graph``, ``user_info``/``metadata_props``, an entry's key and
value (MindIR and ONNX alike)."""
NO_PROVENANCE = "no provenance: not written by amptool"
"""How a file without provenance is labelled wherever amptool shows one."""


def read_provenance(path, key: Optional[bytes] = None) -> Optional[Provenance]:
    """The provenance amptool wrote into the MindIR or ONNX file at ``path`` (a split
    MindIR's ``x.mindir`` finds its ``x_graph.mindir``), or None when the file carries none:
    a foreign artefact, or one written before amptool recorded provenance.

    ``key``: the key of an encrypted MindIR. Raises ``UsageError`` (one line) when the file
    is missing, is not a MindIR or ONNX model, is encrypted and no key (or a wrong one) is
    given, or holds a provenance entry that is not a valid ``Provenance`` (or one newer than
    this amptool reads)."""
    path = locate(path)
    if not path.is_file():
        raise UsageError(f"{path} does not exist", "check the path")
    fmt = "ONNX" if path.suffix.lower() == ".onnx" else "MindIR"
    text = _entries_or_none(path)
    if text is None:  # not a plain model: an encrypted MindIR, or no model at all
        if fmt != "MindIR" or not _encrypted(path):
            raise unreadable(path, fmt, "not a protobuf model")
        text = _entries(decrypted_bytes(path, key), path, fmt)
    value = text.get(PROVENANCE_KEY)
    return None if value is None else parse_provenance(value, f"in {path}")


def _entries_or_none(path: Path) -> Optional[dict]:
    """key -> value of the file's field-14 entries, or None when the file is not a plain
    (unencrypted) model: it does not walk as protobuf fields or holds no graph."""
    if path.stat().st_size == 0:
        return None
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            return _walk(data)
        except WireError:
            return None


def _entries(data, path: Path, fmt: str) -> dict:
    try:
        found = _walk(data)
    except WireError as exc:
        raise unreadable(path, fmt, str(exc)) from None
    if found is None:
        raise unreadable(path, fmt, "no graph")
    return found


def _walk(data) -> Optional[dict]:
    """The entries of the model message in ``data``; None when it has no graph field."""
    entries, graph = {}, False
    for number, _, start, end in fields(data, 0, len(data)):
        if number == GRAPH:
            graph = True
        elif number == ENTRIES:
            key = value = b""
            for inner, _, a, b in fields(data, start, end):
                if inner == KEY:
                    key = bytes(data[a:b])
                elif inner == VALUE:
                    value = bytes(data[a:b])
            try:
                entries[key.decode("utf-8")] = value.decode("utf-8")
            except UnicodeDecodeError:
                raise WireError("an entry that is not UTF-8 text") from None
    return entries if graph else None


def _encrypted(path: Path) -> bool:
    try:
        return is_encrypted(path)
    except (ImportError, RuntimeError):
        return False
