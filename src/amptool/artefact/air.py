"""AIR files: amptool does not read them (they run on Ascend with CANN tools).

Same reader functions as ``mindir.py``; each refuses with one line.
"""
from __future__ import annotations

from typing import NoReturn

from amptool.errors import UsageError

FORMAT = "AIR"
SUFFIX = ".air"


def is_encrypted(path) -> bool:
    return False


def _refuse(path) -> NoReturn:
    raise UsageError(f"{path}: amptool reads MINDIR and ONNX files, not AIR",
                     "inspect the MINDIR export of the same model")


def describe(path, key: bytes | None = None) -> dict:
    _refuse(path)


def read_weights(path, key: bytes | None = None) -> dict:
    _refuse(path)
