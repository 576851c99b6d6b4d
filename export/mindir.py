"""MindIR: written with ``mindspore.export``; read back by ``amptool.artefact.mindir``.

Every writer module (``mindir``, ``onnx``, ``air``) exposes the same functions:
``check_available(device)`` and ``write(net, inputs, path, key=None, dynamic_batch=False,
release=None, entries=None)``, which returns ``(main file, facts)``: the main file is
``path``, or ``<name>_graph.mindir`` when the weights are written apart (past 1 GiB of
parameters; see ``split``); facts are what the manifest records of the artefact
(``describe``'s dict) when the writer has them without reading the weights back, else None.
``entries`` (str -> str: the provenance) go into the file's ``user_info`` (an ONNX's
``metadata_props``; AIR has no place for them). ``release``, when given,
frees ``net``'s weights (the caller has no more use for it); a writer calls it once it no
longer needs the network, or leaves it to the caller.

A single-file MindIR is streamed. ``mindspore.export`` writing one file holds every weight
twice besides the network (each parameter's bytes copied into the ``ModelProto``, then the
whole message serialized): about 3x the weights at its peak. Its split form writes one
parameter at a time. So MindSpore writes the split form into a private folder, and the
single file is made from it: the graph's ``ModelProto`` with its parameters cleared, then
for each parameter, in the graph's order, a ``ModelProto`` holding that parameter alone
with its bytes in ``raw_data`` (as MindSpore's single file holds them), each serialized by
protobuf's own classes. Protobuf parses messages of one type written one after another as
their merge (a sub-message merges, a repeated field appends), so the file parses as the
``ModelProto`` MindSpore writes, weights bit for bit; ``mindspore.load`` and
``amptool.artefact.mindir`` read it. An encrypted MindIR (``key``) is encrypted by
MindSpore as one message, and a graph with map parameters has no split form: both are
written by ``mindspore.export`` directly (at its peak). The network's weights are let go
(``release``) before the file is streamed, which then holds one parameter twice (its
bytes, and its message serialized).
"""
from __future__ import annotations

from amptool.artefact.files import mindir_variables, split_mindir
from amptool.artefact.mindir import (ENC_MODE, FORMAT, describe, external_bytes, load_graph,
                                     read_model)
from amptool.errors import UsageError, first_line
from amptool.files.fileio import atomic_path, remove_tree

from .split import mindspore_limit, writes_apart

PARTS = ".parts"
"""Suffix of the private folder MindSpore writes the split form into before streaming."""


def check_available(device: str) -> None:
    """MindIR export works on every backend."""


def write(net, inputs, path, key: bytes | None = None, dynamic_batch: bool = False,
          release=None, entries: dict | None = None):
    """Export ``net`` traced with ``inputs`` to ``path`` (a name MindSpore accepts, in a
    folder of its own: a split export adds ``<name>_variables/``); returns (the main file,
    its facts or None). A graph with dynamic dimensions is loaded back and run once, since
    MindSpore can write one that it cannot compile again (control flow on a dimension that
    is now unknown)."""
    from pathlib import Path

    path = Path(path)
    facts = None
    if key is None and not writes_apart(net):
        facts = _write_streamed(net, inputs, path, release, entries)
    else:
        _export(net, inputs, path, key, entries=entries)
    written = path
    if not path.is_file():
        written = split_mindir(path)
        if not written.is_file() or mindir_variables(written) is None:
            raise UsageError(f"mindspore.export returned without writing {path.name} or "
                             f"{written.name} with its variables folder",
                             "export another --format, and report it with the model")
    if any(dim is None or dim < 0 for item in inputs for dim in item.shape):
        check_executes(written, inputs, key)
    return written, facts


def _export(net, inputs, path, key: bytes | None = None, limit: int | None = None,
            entries: dict | None = None) -> None:
    """``mindspore.export`` to ``path``; ``limit``: parameter bytes past which it writes
    the split form (None: its own, or ``AMPTOOL_SPLIT_BYTES``); ``entries`` are put into
    the model's ``user_info`` before MindSpore serializes (and encrypts) it."""
    import functools

    import mindspore as ms
    import mindspore.train.serialization as serialization

    extra: dict = {"enc_key": key, "enc_mode": ENC_MODE} if key else {}
    if entries:
        extra["custom_func"] = functools.partial(_fill_user_info, entries)
    with mindspore_limit(serialization, "TOTAL_SAVE", limit):
        ms.export(net, *inputs, file_name=str(path), file_format=FORMAT, **extra)


def _fill_user_info(entries: dict, model) -> None:
    for name, value in entries.items():
        model.user_info[name] = value


def _write_streamed(net, inputs, path, release=None,
                    entries: dict | None = None) -> dict | None:
    """Write the single file ``path`` from the split form MindSpore writes into a private
    folder beside it (``release``, if given, called in between); returns the artefact's
    facts (None when MindSpore wrote ``path`` itself: a graph with map parameters, or
    without parameters)."""
    parts = path.with_name(path.name + PARTS)
    parts.mkdir()
    try:
        try:
            _export(net, inputs, parts / path.name, limit=0, entries=entries)
        except ValueError as exc:
            if "MapParameter" not in str(exc):
                raise
            _export(net, inputs, path, entries=entries)  # no split form: its single file
            return None
        if release is not None:
            release()
        graph = split_mindir(parts / path.name)
        if not graph.is_file():  # nothing to write apart: the file is complete
            (parts / path.name).replace(path)
            return None
        stream_single(graph, path)
        return describe(graph)
    finally:
        remove_tree(parts)


def stream_single(graph, target) -> None:
    """Write the single-file MindIR ``target`` from the split MindIR ``graph`` (its
    ``_variables`` beside it), one parameter in memory at a time (see the module's
    docstring)."""
    from mindspore.train import mind_ir_pb2

    model = read_model(graph)
    head = mind_ir_pb2.ModelProto()
    head.CopyFrom(model)
    head.graph.ClearField("parameter")
    with atomic_path(target) as tmp, open(tmp, "wb") as out:
        out.write(head.SerializeToString())
        del head
        for param in model.graph.parameter:
            piece = mind_ir_pb2.ModelProto()
            stored = piece.graph.parameter.add()
            stored.CopyFrom(param)
            stored.ClearField("external_data")
            if param.HasField("external_data"):
                stored.raw_data = external_bytes(graph, param, param.name)
            out.write(piece.SerializeToString())
            del piece, stored


def check_executes(path, inputs, key: bytes | None = None) -> None:
    """Run the MindIR at ``path`` once, every dynamic dimension 3 (the eager
    probe at resolve used 2); one line if it cannot."""
    import mindspore as ms
    import numpy as np

    arrays = [np.zeros([3 if dim is None or dim < 0 else dim for dim in item.shape],
                       ms.dtype_to_nptype(item.dtype)) for item in inputs]
    try:
        load_graph(path, key)(*[ms.Tensor(a) for a in arrays])
    except (RuntimeError, TypeError, ValueError) as exc:
        raise UsageError(f"MindSpore wrote a MindIR with dynamic dimensions that it cannot run "
                         f"back ({first_line(exc)})",
                         "export with a fixed batch (drop --dynamic-batch)") from None
