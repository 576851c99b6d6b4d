"""Exported artefacts as files: format readers, manifests, keys and runners.

``reader(fmt)`` gives the module that reads one format (``mindir``, ``onnx``, ``air``); each
has ``is_encrypted``, ``describe`` and ``read_weights``. ``load_runner(path)`` runs any
artefact through one interface, ``run(inputs) -> outputs``.
"""
from __future__ import annotations

from typing import Optional

FORMATS = ("MINDIR", "AIR", "ONNX")


def reader(fmt: str):
    """The reader module of ``fmt`` (MINDIR, AIR or ONNX)."""
    from . import air, mindir, onnx

    return {"MINDIR": mindir, "AIR": air, "ONNX": onnx}[fmt]


def stored_weights(path, fmt: str, encrypted: bool = False) -> Optional[dict]:
    """name -> array of the floating-point weights an artefact stores, or None where they
    cannot be read here (encrypted MindIR, AIR, onnx not installed, unreadable file)."""
    from amptool.errors import AmpToolError

    if encrypted or fmt not in ("MINDIR", "ONNX"):
        return None
    try:
        return reader(fmt).read_weights(path) or None
    except AmpToolError:
        return None
