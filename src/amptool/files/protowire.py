"""The protobuf wire format, for the files read or written a field at a time (a MindIR's or
an ONNX's tensors without their bytes, a checkpoint an entry at a time): varints, field keys
and lengths, a walk over a message's fields in a buffer without parsing their values, and
a model's bytes less its tensors' data (``without_tensor_bytes``)."""
from __future__ import annotations


class WireError(ValueError):
    """The bytes end inside a field, or hold a wire type these files never use."""


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def delimited_head(number: int, length: int) -> bytes:
    """Key and length of a length-delimited field whose payload follows."""
    return varint_bytes(number << 3 | 2) + varint_bytes(length)


def delimited(number: int, payload) -> bytes:
    """A whole length-delimited field: key, length, payload."""
    return delimited_head(number, len(payload)) + bytes(payload)


def read_varint(buf, pos: int, end: int) -> tuple:
    """(value, position after it) of the varint at ``buf[pos]``."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def fields(buf, start: int, end: int):
    """(number, field start, value start, value end) of each field of the message held in
    ``buf[start:end]``; the value of a length-delimited field is its payload."""
    pos = start
    while pos < end:
        first = pos
        key, pos = read_varint(buf, pos, end)
        wire = key & 7
        if wire == 0:
            _, after = read_varint(buf, pos, end)
        elif wire == 1:
            after = pos + 8
        elif wire == 2:
            length, pos = read_varint(buf, pos, end)
            after = pos + length
        elif wire == 5:
            after = pos + 4
        else:
            raise WireError(f"wire type {wire}")
        if after > end:
            raise WireError("truncated message")
        yield key >> 3, first, pos, after
        pos = after


def without_tensor_bytes(buf, graph: int, tensor: int, data: int) -> tuple:
    """(the bytes of the model message in ``buf`` less field ``data`` of each ``tensor``
    field of each ``graph`` field, [(tensor field start, end, (start, end) of its data or
    None)] in order): a MindIR's or an ONNX's ``ModelProto`` without its weights' bytes,
    parsed without them. A graph field may come many times (a file written a parameter at
    a time): a parser merges them, and the tensors keep their order; of several data
    fields the last counts, as a parser takes it."""
    lean, tensors = bytearray(), []
    for number, first, value, after in fields(buf, 0, len(buf)):
        if number != graph:
            lean += buf[first:after]
            continue
        inner = bytearray()
        for num, head, start, stop in fields(buf, value, after):
            if num != tensor:
                inner += buf[head:stop]
                continue
            kept, raw = bytearray(), None
            for n, f, v, a in fields(buf, start, stop):
                if n == data:
                    raw = (v, a)
                else:
                    kept += buf[f:a]
            inner += delimited(tensor, kept)
            tensors.append((head, stop, raw))
        lean += delimited(graph, inner)
    return bytes(lean), tensors
