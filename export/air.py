"""AIR (Ascend IR): the MindIR code path with the Ascend backend.

Deprecated upstream in MindSpore 2.10; MINDIR is the way forward. Refused on any host
without an Ascend device before any work is done. Same writer functions as
``mindir.py``.
"""
from __future__ import annotations

from amptool.artefact.air import FORMAT
from amptool.artefact.mindir import ENC_MODE
from amptool.errors import DeviceError, UsageError
from amptool.artefact import availability


def check_available(device: str | None = None) -> None:
    """Raise DeviceError unless this host has an Ascend device (and the export runs on it)."""
    works, why, fix = availability("AIR")
    if not works:
        raise DeviceError(f"AIR export {why}", fix)
    if device not in (None, "auto", "Ascend"):
        raise DeviceError(f"AIR export runs on the Ascend backend, not {device}",
                          "pass --device Ascend (or auto)")


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False,
          release=None, entries: dict | None = None):
    """Export to ``path``; returns (``path``, None) (AIR keeps its weights in the one file,
    which is not read here); ``release`` is not called: the caller lets the network go.
    ``entries`` (provenance) are not written: MindSpore's AIR export has no place for
    them."""
    from pathlib import Path

    import mindspore as ms

    extra = {"enc_key": key, "enc_mode": ENC_MODE} if key else {}
    ms.export(net, *inputs, file_name=str(path), file_format=FORMAT, **extra)
    if not Path(path).is_file():
        raise UsageError(f"mindspore.export returned without writing {Path(path).name}",
                         "export MINDIR instead")
    return Path(path), None
