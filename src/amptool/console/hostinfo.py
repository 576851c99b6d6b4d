"""What this host can do: MindSpore version, devices, export formats."""
from __future__ import annotations

import platform

import amptool
from amptool.artefact import FORMATS, availability
from amptool.runtime.device import available_devices, import_mindspore


def host_info() -> dict:
    ms = import_mindspore()
    formats = {}
    for fmt in FORMATS:
        works, why, fix = availability(fmt)
        formats[fmt] = (works, "; ".join(part for part in (why, fix) if part))
    return {"amptool": amptool.__version__, "mindspore": ms.__version__,
            "python": platform.python_version(), "devices": available_devices(),
            "formats": formats}
