"""MindIR: written with ``mindspore.export``; read back by ``amptool.artefact.mindir``.

Every writer module (``mindir``, ``onnx``, ``air``) exposes the same functions:
``check_available(device)`` and ``write(net, inputs, path, key=None, dynamic_batch=False)``.
"""
from __future__ import annotations

from amptool.artefact.mindir import ENC_MODE, FORMAT


def check_available(device: str) -> None:
    """MindIR export works on every backend."""


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False) -> None:
    """Export ``net`` traced with ``inputs`` to ``path`` (a name MindSpore accepts)."""
    import mindspore as ms

    extra = {"enc_key": key, "enc_mode": ENC_MODE} if key else {}
    ms.export(net, *inputs, file_name=str(path), file_format=FORMAT, **extra)
