"""The reader of each artefact format: ``reader(fmt)`` is the module (``mindir``, ``onnx``,
``air``) with ``is_encrypted``, ``describe`` and ``read_weights``; ``stored_weights`` reads
an artefact's weights where they can be read here."""
from __future__ import annotations

from typing import Optional

from amptool.artefact import air, mindir, onnx
from amptool.errors import AmpToolError

READERS = {"MINDIR": mindir, "AIR": air, "ONNX": onnx}
"""The reader module of each format."""


def reader(fmt: str):
    """The reader module of ``fmt`` (MINDIR, AIR or ONNX)."""
    return READERS[fmt]


def stored_weights(path, fmt: str, encrypted: bool = False) -> Optional[dict]:
    """name -> array of the floating-point weights an artefact stores, or None where they
    cannot be read here (encrypted MindIR, AIR, onnx not installed, unreadable file)."""
    if encrypted or fmt not in ("MINDIR", "ONNX"):
        return None
    try:
        return reader(fmt).read_weights(path) or None
    except AmpToolError:
        return None
