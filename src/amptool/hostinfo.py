"""What this host can do: MindSpore version, devices, export formats."""
from __future__ import annotations

import importlib.util
import platform

import amptool

from .device import available_devices, import_mindspore


def onnx_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def host_info() -> dict:
    ms = import_mindspore()
    devices = available_devices()
    ascend = "Ascend" in devices
    formats = {
        "MINDIR": (True, "works on every backend"),
        "AIR": (ascend, "Ascend device present" if ascend else
                "needs an Ascend device with CANN (this host has "
                f"{', '.join(devices)}); deprecated upstream, export MINDIR instead"),
        "ONNX": (onnx_available(), "onnx and onnxruntime installed" if onnx_available() else
                 "install the onnx extra: pip install 'amptool[onnx]'"),
    }
    return {"amptool": amptool.__version__, "mindspore": ms.__version__,
            "python": platform.python_version(), "devices": devices, "formats": formats}
