"""AIR (Ascend IR): the MindIR code path with the Ascend backend.

Deprecated upstream in MindSpore 2.10; MINDIR is the way forward. Refused on any host
without an Ascend device before any work is done. Same functions as ``mindir.py``.
"""
from __future__ import annotations

from amptool.errors import DeviceError, UsageError

FORMAT = "AIR"
SUFFIX = ".air"


def check_available(device: str | None = None) -> None:
    """Raise DeviceError unless this host has an Ascend device (and the export runs on it)."""
    from amptool.device import available_devices

    devices = available_devices()
    if "Ascend" not in devices:
        raise DeviceError(f"AIR export needs an Ascend device with CANN; this host has only "
                          f"{', '.join(devices)}", "export MINDIR instead (AIR is deprecated upstream)")
    if device not in (None, "auto", "Ascend"):
        raise DeviceError(f"AIR export runs on the Ascend backend, not {device}",
                          "pass --device Ascend (or auto)")


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False) -> None:
    import mindspore as ms

    extra = {"enc_key": key, "enc_mode": "AES-GCM"} if key else {}
    ms.export(net, *inputs, file_name=str(path), file_format=FORMAT, **extra)


def is_encrypted(path) -> bool:
    return False


def _refuse(path):
    raise UsageError(f"{path}: amptool reads MINDIR and ONNX files, not AIR",
                     "inspect the MINDIR export of the same model")


def describe(path, key: bytes | None = None) -> dict:
    _refuse(path)


def read_weights(path, key: bytes | None = None) -> dict:
    _refuse(path)
