"""MindIR: written with ``mindspore.export``; read back by ``amptool.artefact.mindir``.

Every writer module (``mindir``, ``onnx``, ``air``) exposes the same functions:
``check_available(device)`` and ``write(net, inputs, path, key=None, dynamic_batch=False)``,
which returns the artefact's main file: ``path``, or ``<name>_graph.mindir`` when MindSpore
wrote the weights apart (past 1 GiB of parameters; see ``split``).
"""
from __future__ import annotations

from amptool.artefact.mindir import ENC_MODE, FORMAT


def check_available(device: str) -> None:
    """MindIR export works on every backend."""


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False):
    """Export ``net`` traced with ``inputs`` to ``path`` (a name MindSpore accepts, in a
    folder of its own: a split export adds ``<name>_variables/``); returns the main file.
    A graph with dynamic dimensions is loaded back and run once, since MindSpore can write
    one that it cannot compile again (control flow on a dimension that is now unknown)."""
    from pathlib import Path

    import mindspore as ms
    import mindspore.train.serialization as serialization

    from amptool.artefact.files import mindir_variables, split_mindir
    from amptool.errors import UsageError

    from .split import mindspore_limit

    path = Path(path)
    extra = {"enc_key": key, "enc_mode": ENC_MODE} if key else {}
    with mindspore_limit(serialization, "TOTAL_SAVE"):
        ms.export(net, *inputs, file_name=str(path), file_format=FORMAT, **extra)
    written = path
    if not path.is_file():
        written = split_mindir(path)
        if not written.is_file() or mindir_variables(written) is None:
            raise UsageError(f"mindspore.export returned without writing {path.name} or "
                             f"{written.name} with its variables folder",
                             "export another --format, and report it with the model")
    if any(dim is None or dim < 0 for item in inputs for dim in item.shape):
        check_runs(written, inputs, key)
    return written


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
