"""MindIR: written with ``mindspore.export``; read back by ``amptool.artefact.mindir``.

Every writer module (``mindir``, ``onnx``, ``air``) exposes the same functions:
``check_available(device)`` and ``write(net, inputs, path, key=None, dynamic_batch=False)``.
"""
from __future__ import annotations

from amptool.artefact.mindir import ENC_MODE, FORMAT


def check_available(device: str) -> None:
    """MindIR export works on every backend."""


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False) -> None:
    """Export ``net`` traced with ``inputs`` to ``path`` (a name MindSpore accepts). A graph
    with dynamic dimensions is loaded back and run once, since MindSpore can write one
    that it cannot compile again (control flow on a dimension that is now unknown)."""
    import mindspore as ms

    extra = {"enc_key": key, "enc_mode": ENC_MODE} if key else {}
    ms.export(net, *inputs, file_name=str(path), file_format=FORMAT, **extra)
    if any(dim is None or dim < 0 for item in inputs for dim in item.shape):
        check_runs(path, inputs, key)


def check_runs(path, inputs, key: bytes | None = None) -> None:
    """Run the MindIR at ``path`` once, every dynamic dimension 3 (the eager
    probe at resolve used 2); one line if it cannot."""
    import mindspore as ms
    import numpy as np

    from amptool.artefact.mindir import load_graph
    from amptool.errors import UsageError, first_line

    arrays = [np.zeros([3 if dim is None or dim < 0 else dim for dim in item.shape],
                       ms.dtype_to_nptype(item.dtype)) for item in inputs]
    try:
        load_graph(path, key)(*[ms.Tensor(a) for a in arrays])
    except (RuntimeError, TypeError, ValueError) as exc:
        raise UsageError(f"MindSpore wrote a MindIR with dynamic dimensions that it cannot run "
                         f"back ({first_line(exc)})",
                         "export with a fixed batch (drop --dynamic-batch)") from None
