"""Checkpoints read one tensor at a time, and loaded into a network's own parameters.

``mindspore.load_checkpoint`` reads a .ckpt whole: the file's bytes, the parsed message
and the tensors built from it are alive at once (about 3x the file at its peak), and
loading that dict into a freshly built network adds the network's own initial weights.
A .ckpt written by ``mindspore.save_checkpoint`` is a run of ``Checkpoint`` messages of
one ``value`` each (a tensor past 512 MiB in several consecutive slices of one tag), so
each entry can be read on its own: its tag, dims and type are found from the fields' keys
and lengths (``protowire``), and its bytes are read from the file straight into the array
its tensor is made on (one copy, no record bytes or parsed message beside it).
``load_streamed`` puts each entry into the network's existing parameter
(``set_data``) and lets it go; a network built ``uninitialized()`` (MindSpore's
``no_init_parameters``) has no initial weights to begin with: the peak is the loaded
weights plus one tensor.

safetensors files (memory-mapped by MindSpore) and anything this reader does not know
(encrypted files, map parameters) go through ``read_checkpoint``, entry by entry.

``write_entry`` writes one entry the way ``save_checkpoint`` does (the same bytes), from
the array's own buffer, so that a file can be written an entry at a time:
``save_checkpoint`` takes every entry at once and copies each to bytes again.
"""
from __future__ import annotations

import contextlib
import mmap
from pathlib import Path

from amptool.files.protowire import delimited_head, fields, read_varint, varint_bytes
from amptool.network import checkpoint
from amptool.network.checkpoint import is_float, misfit_error

CRC_TRAILER = 17
"""``b"crc_num"`` and a 10-byte checksum that ``save_checkpoint(crc_check=True)`` appends."""


class _Unstreamable(Exception):
    """The file is not a plain run of ``Checkpoint`` records: read it whole instead."""


@contextlib.contextmanager
def uninitialized():
    """Parameters created inside take no memory until they are set or used (MindSpore's
    ``no_init_parameters``): for a network whose weights are all loaded next, or whose
    structure alone is read."""
    try:
        from mindspore.nn.utils import no_init_parameters
    except ImportError:  # a MindSpore without it: initialized as usual
        yield
        return
    with no_init_parameters():
        yield


def build_uninitialized(build):
    """``build()`` with its parameters left uninitialized (``uninitialized``). A factory that
    computes on the fresh weights it made (scales them, copies others into them) cannot be
    built so, and is built as usual. MindSpore runs those computations asynchronously: the
    failure of one on a weight without data is reported when something waits for it, which
    may be the next, unrelated operation (the usual build, or anything after it). So every
    operation the attempt launched is waited for before it counts as built, and a failed
    attempt is settled before the usual build starts."""
    settle()  # what was launched before is not this attempt's to report
    try:
        with uninitialized():
            net = build()
            settle()
        return net
    except Exception:  # its own error, if it has one, comes from the usual build
        try:
            settle()
        except RuntimeError:
            pass  # the failed attempt's operations, reported once more
        return build()


def settle() -> None:
    """Wait until every operation MindSpore has launched has run; the error of one that
    failed is raised here."""
    from mindspore.common.api import _pynative_executor

    _pynative_executor.sync()


def _records(mapped, size: int):
    """(tag, dims, type name, (start, end) of the tensor's bytes) of every ``value`` record
    of a .ckpt mapped in ``mapped``, in file order. Only the fields' keys and lengths are
    read: the tensors' bytes are not touched (their pages never count as this process's)."""
    trailer = max(size - CRC_TRAILER, 0)
    end = trailer if mapped[trailer:trailer + 7] == b"crc_num" else size
    for number, first, value, after in fields(mapped, 0, end):
        if number != 1 or mapped[first] != 0x0A:  # field 1 (value), length-delimited
            raise _Unstreamable(f"unexpected field at byte {first}")
        tag = tensor = None
        for num, key, start, stop in fields(mapped, value, after):
            if num == 1 and mapped[key] & 7 == 2:
                tag = bytes(mapped[start:stop]).decode("utf-8")
            elif num == 2 and mapped[key] & 7 == 2:
                tensor = _tensor_fields(mapped, start, stop)
            elif num == 3:
                raise _Unstreamable("map parameter")
        if tag is None or tensor is None:
            raise _Unstreamable(f"record at byte {first} without a tag or a tensor")
        yield (tag, *tensor)


def _tensor_fields(mapped, start: int, end: int) -> tuple:
    """(dims, type name, (start, end) of the bytes) of a ``TensorProto`` in ``mapped``."""
    dims, kind, span = [], None, (end, end)
    for num, key, value, after in fields(mapped, start, end):
        wire = mapped[key] & 7
        if num == 1 and wire == 0:
            dims.append(read_varint(mapped, value, after)[0])
        elif num == 1 and wire == 2:  # packed
            while value < after:
                dim, value = read_varint(mapped, value, after)
                dims.append(dim)
        elif num == 2 and wire == 2:
            kind = bytes(mapped[value:after]).decode("utf-8")
        elif num == 3 and wire == 2:
            span = (value, after)
    if kind is None:
        raise _Unstreamable(f"tensor at byte {start} without a type")
    return dims, kind, span


def _read_spans(fh, spans: list):
    """The bytes at ``spans`` ((start, end) in the file, in order) as one uint8 array of its
    own, read into it (no other copy is made)."""
    import numpy as np

    data = np.empty(sum(stop - start for start, stop in spans), np.uint8)
    view, pos = data.data, 0
    for start, stop in spans:
        fh.seek(start)
        if fh.readinto(view[pos:pos + stop - start]) != stop - start:
            raise _Unstreamable("the file ends inside a tensor")
        pos += stop - start
    return data


def _build(data, dims, type_name: str):
    """A MindSpore tensor (or the text of a 'str' entry) from a record's bytes (a uint8
    array, which a tensor of a numpy dtype takes without a copy), as ``load_checkpoint``
    builds it."""
    import numpy as np
    from mindspore import Tensor
    from mindspore.train.serialization import Tensor_, tensor_to_ms_type

    if type_name == "str":
        return str(np.frombuffer(data, "U" + str(len(data) // 4))[0])
    if type_name not in tensor_to_ms_type:
        raise _Unstreamable(f"tensor type {type_name}")
    dims = tuple(dims) if list(dims) != [0] else ()
    dtype = NUMPY_TYPES.get(type_name)
    if dtype is None:  # no numpy dtype (bfloat16, int4): MindSpore's own conversion
        return Tensor(Tensor_.convert_bytes_to_tensor(data.tobytes(), dims,
                                                      tensor_to_ms_type[type_name]))
    return Tensor.from_numpy(data.view(dtype).reshape(dims))


NUMPY_TYPES = {"Int8": "int8", "UInt8": "uint8", "Int16": "int16", "UInt16": "uint16",
               "Int32": "int32", "UInt32": "uint32", "Int64": "int64", "UInt64": "uint64",
               "Float16": "float16", "Float32": "float32", "Float64": "float64",
               "Bool": "bool"}
"""MindSpore's checkpoint type names whose bytes are those of a numpy dtype."""


def _stream_ckpt(path: Path, wanted):
    """(name, tensor or text) of each entry ``wanted`` accepts, one at a time."""
    with open(path, "rb") as fh:
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            records = list(_records(mapped, path.stat().st_size))
        pending, spans = None, []
        head: tuple = ()  # (dims, kind) of the pending entry
        for tag, dims, kind, span in records:
            if pending is not None and tag != pending:
                yield pending, _build(_read_spans(fh, spans), *head)
                pending, spans = None, []
            if not wanted(tag):
                continue
            pending, head = tag, (dims, kind)
            spans.append(span)
        if pending is not None:
            yield pending, _build(_read_spans(fh, spans), *head)


def iter_checkpoint(path, wanted=None):
    """(name, MindSpore tensor or text) of every entry of a checkpoint, one at a time;
    ``wanted(name)`` False skips an entry without reading its bytes. Errors as
    ``read_checkpoint`` gives them."""
    path = Path(path)
    wanted = wanted or (lambda name: True)
    done: set = set()
    if path.is_file() and path.stat().st_size and checkpoint.detect_format(path) == "ckpt":
        try:
            for name, value in _stream_ckpt(path, wanted):
                done.add(name)
                yield name, value
            return
        except (_Unstreamable, UnicodeDecodeError, KeyError, ValueError, TypeError):
            pass  # a file of another layout: the whole-file reader takes it or says why
    params = checkpoint.read_checkpoint(path)  # read at call time: tests replace it
    for name in list(params):
        value = params.pop(name)
        if wanted(name) and name not in done:
            yield from checkpoint._decode_text({name: value}).items()


def checkpoint_arrays(path) -> dict:
    """name -> numpy array of every tensor entry of a checkpoint (texts left out), read one
    entry at a time: what ``read_checkpoint(path)``'s tensors give as arrays, without the whole
    file's tensors alive beside the arrays."""
    return {name: value.asnumpy() for name, value in iter_checkpoint(path)
            if not isinstance(value, str)}


def load_streamed(net, path, source: str = "checkpoint", to_dtype=None) -> None:
    """Read the checkpoint at ``path`` into ``net``'s own parameters one tensor at a time.

    Float entries are cast to each parameter's dtype (``to_dtype(param)``, when given,
    names another one for float parameters: the parameter takes it). Names or shapes
    that do not fit the network are refused in one error, as ``load_into_net`` does.
    """
    params = {p.name: p for p in net.get_parameters()}
    loaded, mismatched = set(), []
    for name, value in iter_checkpoint(path, lambda n: n in params):
        param = params[name]
        if isinstance(value, str):
            continue
        if tuple(value.shape) != tuple(param.shape):
            mismatched.append(f"{name} {tuple(value.shape)} vs {tuple(param.shape)}")
            continue
        dtype = to_dtype(param) if to_dtype is not None and is_float(param) else param.dtype
        if is_float(value) and value.dtype != dtype:
            value = value.astype(dtype)
        if param.dtype != dtype:
            param.set_dtype(dtype)
        param.set_data(value)
        if hasattr(param, "init_param"):
            param.init_param = True
        loaded.add(name)
        del value
    missing = [n for n in params if n not in loaded]
    if missing or mismatched:
        raise misfit_error(missing, mismatched, source)


SLICE_BYTES = 512 * 1024 * 1024
"""``save_checkpoint`` writes a tensor's bytes as records of at most this many bytes each."""


def record_head(name: str, dims, type_name: str, nbytes: int) -> bytes:
    """The bytes of one ``Checkpoint`` record (one ``value``: tag, then the tensor's dims and
    type) that come before its ``nbytes`` of tensor content, as ``save_checkpoint`` writes
    them; ``type_name`` is MindSpore's (``Float16``, ``Int32``, ``str``...)."""
    tag, kind = name.encode("utf-8"), type_name.encode("utf-8")
    head = b"".join(varint_bytes(1 << 3) + varint_bytes(int(d)) for d in dims) + \
        delimited_head(2, len(kind)) + kind + delimited_head(3, nbytes)
    tensor = len(head) + nbytes
    value = delimited_head(1, len(tag)) + tag + delimited_head(2, tensor)
    return delimited_head(1, len(value) + tensor) + value + head


def write_entry(fh, name: str, dims, type_name: str, data) -> None:
    """One checkpoint entry written to ``fh`` as ``mindspore.save_checkpoint`` writes it: one
    record (``record_head``, then the bytes) per slice of at most SLICE_BYTES of the
    tensor's bytes, which go out of ``data``'s own buffer (a contiguous numpy array, or
    bytes), not a copy."""
    import numpy as np

    raw = memoryview(data) if isinstance(data, (bytes, bytearray)) else \
        np.ascontiguousarray(data).reshape(-1).data.cast("B")
    for start in range(0, max(len(raw), 1), SLICE_BYTES):
        part = raw[start:start + SLICE_BYTES]
        fh.write(record_head(name, dims, type_name, len(part)))
        fh.write(part)
