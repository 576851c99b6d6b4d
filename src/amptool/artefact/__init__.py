"""Exported artefacts as files: the format registry, format readers, file sets, keys,
runners, the provenance inside each file (``provenance``) and the precision audit of its
graph (``audit``). May import ``amptool.network`` (a runner rebuilds a model), ``amptool.runtime``,
``amptool.documents`` (the manifest), ``amptool.files`` and ``amptool.errors``.

``FORMATS`` names every format and ``availability(fmt)`` says whether this host can write
it and why (``amptool info``, export and the pipeline ask here); this module imports no
numpy, so the command line reads it. ``readers.reader(fmt)`` gives the module that reads one
format (``mindir``, ``onnx``, ``air``), each with ``is_encrypted``, ``describe`` and
``read_weights``. ``load_runner(path)`` runs any artefact through one interface,
``run(inputs) -> outputs``.
"""
from __future__ import annotations

import importlib.util

from amptool.runtime.device import available_devices

FORMATS = ("MINDIR", "AIR", "ONNX")
"""Every artefact format, in the order they are listed."""
INSTALL_HINT = "install the onnx extra: pip install 'amptool[onnx]'"
"""The fix where ONNX is asked for and the onnx extra is not installed."""


def onnx_installed() -> bool:
    """Whether the onnx extra (onnx and onnxruntime) is installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def availability(fmt: str) -> tuple:
    """(works, why, fix) for exporting ``fmt`` on this host: ``why`` says what it depends
    on, ``fix`` what to do where it does not work ("" where it does)."""
    if fmt == "MINDIR":
        return True, "works on every backend", ""
    if fmt == "AIR":
        devices = available_devices()
        if "Ascend" in devices:
            return True, "Ascend device present", ""
        return (False, f"needs an Ascend device with CANN (this host has {', '.join(devices)})",
                "deprecated upstream, export MINDIR instead")
    if fmt == "ONNX":
        if onnx_installed():
            return True, "onnx and onnxruntime installed", ""
        return False, "needs onnx and onnxruntime, which are not installed", INSTALL_HINT
    raise KeyError(fmt)
