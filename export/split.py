"""When MindSpore writes an artefact's weights apart from its graph, and how big an export is.

MindSpore decides by itself: MINDIR past ``TOTAL_SAVE`` (1 GiB of parameters, in
mindspore/train/serialization.py) becomes ``<name>_graph.mindir`` + ``<name>_variables/``;
``mindspore.onnx.export`` past ``PROTO_LIMIT_SIZE`` (2 GiB, mindspore/onnx/onnx_export.py)
writes one external file a parameter. Both are module constants (KiB) read at each call.
amptool has ONNX write its weights apart from the MINDIR's threshold on (``onnx_apart_bytes``):
below 2 GiB MindSpore's exporter otherwise holds the network, the ONNX message and its
serialized bytes at once (measured: 2.26 GB against 1.16 GB for a 150M-parameter network's
fp32 and fp16 ONNX). ``AMPTOOL_SPLIT_BYTES`` (internal, for tests: a small network then
takes the path a gigabyte one takes) sets both for the duration of one export call.
"""
from __future__ import annotations

import contextlib
import os

from amptool.errors import UsageError
from amptool.files import fileio

SPLIT_ENV = "AMPTOOL_SPLIT_BYTES"
"""Parameter bytes past which an export writes weights apart (unset: MindSpore's own)."""

HEADROOM = 1.05
"""Free space asked for over the parameter bytes (graph, padding, the manifest)."""
SLACK = 16 << 20


def split_bytes() -> int | None:
    """``AMPTOOL_SPLIT_BYTES`` as a byte count, or None when unset."""
    value = os.environ.get(SPLIT_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise UsageError(f"{SPLIT_ENV}={value!r} is not a byte count",
                         f"unset {SPLIT_ENV} (MindSpore's own limits apply) or give a whole number")
    return int(value)


def onnx_apart_bytes() -> int:
    """Parameter bytes past which an ONNX export writes its weights apart: where MindSpore
    splits a MINDIR (``TOTAL_SAVE``), or ``AMPTOOL_SPLIT_BYTES``."""
    import mindspore.train.serialization as serialization

    limit = split_bytes()
    return int(serialization.TOTAL_SAVE * 1024) if limit is None else limit


@contextlib.contextmanager
def mindspore_limit(module, attr: str, limit: int | None = None):
    """``module.attr`` (a KiB threshold) set to ``limit`` bytes, else from
    ``AMPTOOL_SPLIT_BYTES``, inside the block."""
    if limit is None:
        limit = split_bytes()
    if limit is None:
        yield
        return
    before = getattr(module, attr)
    setattr(module, attr, limit / 1024)
    try:
        yield
    finally:
        setattr(module, attr, before)


def writes_apart(net) -> bool:
    """Whether ``mindspore.export`` writes ``net``'s MindIR split: its parameters' bytes
    counted as MindSpore counts them (each as a bytes object, ``_save_together``) past
    ``TOTAL_SAVE`` KiB, or past ``AMPTOOL_SPLIT_BYTES``."""
    import sys

    import mindspore.train.serialization as serialization

    limit = split_bytes()
    limit = serialization.TOTAL_SAVE * 1024 if limit is None else limit
    overhead = sys.getsizeof(b"")
    total = sum(int(p.nbytes) + overhead for p in net.get_parameters())
    return total > limit


def param_elements(net) -> tuple:
    """(floating-point elements, bytes of the other parameters) of ``net``."""
    import mindspore as ms

    floats, other = 0, 0
    for p in net.get_parameters():
        n = 1
        for d in p.shape:
            n *= int(d)
        if p.dtype in (ms.float16, ms.float32, ms.float64, ms.bfloat16):
            floats += n
        else:
            other += n * p.itemsize
    return floats, other


def estimate_bytes(elements: tuple, precision: str) -> int:
    """Disk an artefact of ``precision`` takes: its parameter bytes plus headroom."""
    floats, other = elements
    return int((floats * (2 if precision == "fp16" else 4) + other) * HEADROOM) + SLACK


def human(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def check_free_space(folder, needed: int, what: str) -> None:
    """One line when ``folder``'s file system has less than ``needed`` bytes free."""
    free = fileio.free_bytes(folder)  # read at call time: tests replace it
    if free is not None and free < needed:
        raise UsageError(f"{what} needs about {human(needed)} in {folder}, which has "
                         f"{human(free)} free; nothing was written",
                         "free some space, or export elsewhere (--out) or fewer artefacts "
                         "(--precision, --format)")
