"""Checkpoints: one writer, one reader, one loader into a network.

A training checkpoint holds the network, optimizer and loss-scale state plus a few
metadata entries; a converted checkpoint holds weights in fp16 or fp32. Both are
MindSpore ``ckpt`` or ``safetensors`` files, recognised by content, not by suffix.
safetensors holds tensors only, so text metadata (the model, the optimizer) is stored
there as UTF-8 bytes and read back as text: both formats give the same entries.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from amptool.errors import UsageError
from amptool.files.fileio import atomic_path

FORMATS = ("ckpt", "safetensors")
SCALER_PREFIX = "amptool_loss_scale."
META_KEYS = ("epoch", "step", "best_acc", "val_acc", "best_score", "val_score", "score",
             "overflow", "model", "optimizer")
TEXT_PREFIX = "amptool_text."
"""Prefix of a text metadata entry stored as a uint8 tensor of UTF-8 bytes (safetensors)."""


def detect_format(path: str | os.PathLike) -> str:
    """'safetensors' when the file starts with a safetensors JSON header, else 'ckpt'."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(9)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}",
                         "check the path and permissions") from None
    if len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < (1 << 30):
        return "safetensors"
    return "ckpt"


PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
"""Which parser protobuf loads, chosen once per process at its first import. ``import
amptool`` sets it to ``python`` unless it is set: the pure-python parser reads a .ckpt past
2 GiB, which protobuf's default (upb) refuses; a process that set another, or loaded
protobuf first, gets one line naming its parser for such a checkpoint."""

PROTOBUF_LIMIT = 2**31 - 1
"""The largest message (bytes) protobuf's upb and C++ parsers take; its pure-python parser,
the one MindSpore asks for, has no such limit. A .ckpt file is one message."""


def read_checkpoint(path: str | os.PathLike) -> dict:
    """name -> Parameter (or str metadata); one clear error naming why a file cannot be
    read (only a file that does not parse is called truncated or corrupt)."""
    import mindspore as ms

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"checkpoint {path} does not exist", "check the path or train first")
    fmt = detect_format(path)
    size = path.stat().st_size
    if size == 0:
        raise UsageError(f"checkpoint {path} is empty (0 bytes)",
                         "it was cut off as it was written: re-train or re-convert it")
    if fmt == "ckpt":
        check_parser(path, size)
    try:
        with _named_for(path, fmt) as named:
            params = ms.load_checkpoint(str(named), format=fmt)
        return _decode_text(params)
    except Exception as exc:
        raise _read_error(path, fmt, size, exc) from None


def protobuf_implementation() -> str:
    """The implementation protobuf loaded in this process: python, upb or cpp."""
    from google.protobuf.internal import api_implementation

    return api_implementation.Type()


def check_parser(path: Path, size: int) -> None:
    """Refuse a .ckpt past ``PROTOBUF_LIMIT`` when protobuf loaded a parser that cannot take
    it (``import amptool`` asks for the pure-python one; a process that imported protobuf
    first, or set PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION, can have another)."""
    if size <= PROTOBUF_LIMIT:
        return
    kind = protobuf_implementation()
    if kind == "python":
        return
    raise UsageError(f"checkpoint {path} is {size / 1e9:.2f} GB, past the 2 GiB that "
                     f"protobuf's '{kind}' parser, the one this process loaded, can read",
                     "import amptool or mindspore before onnx or protobuf, or set "
                     f"{PROTOBUF_ENV}=python; or save it as safetensors")


def _chain(exc: Optional[BaseException]) -> list:
    found: list = []
    while exc is not None and len(found) < 8:
        found.append(exc)
        exc = exc.__cause__ or exc.__context__
    return found


def _read_error(path: Path, fmt: str, size: int, exc: BaseException) -> UsageError:
    """The one line for a checkpoint MindSpore could not read, naming the cause it gave."""
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    text = " ".join(str(e) for e in chain)
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if names & {"MemoryError", "_CheckpointProtobufSizeError"} or "available memory" in text \
            or "not enough memory" in text:
        return UsageError(f"checkpoint {path} ({size / 1e9:.2f} GB) does not fit in this "
                          "machine's free memory", "free memory or read it on a larger machine; "
                          "safetensors files are memory-mapped")
    if any(isinstance(e, PermissionError) for e in chain):
        return UsageError(f"checkpoint {path} cannot be read: permission denied",
                          "make it readable")
    if "DecodeError" in names or "Fail to parse the input safetensors" in text:
        return UsageError(f"checkpoint {path} cannot be read as {fmt} ({reason[:160]})",
                          "it is truncated or corrupt: re-train or re-convert it")
    import mindspore as ms

    return UsageError(f"checkpoint {path} cannot be read as {fmt} ({reason[:160]})",
                      f"check that it is a checkpoint MindSpore {ms.__version__} reads "
                      "(written by save_checkpoint)")


def _encode_text(meta: dict) -> dict:
    """Text entries as uint8 tensors of their UTF-8 bytes, named with TEXT_PREFIX."""
    import mindspore as ms
    import numpy as np

    encoded = {}
    for key, value in meta.items():
        if isinstance(value, str):
            data = np.frombuffer(value.encode("utf-8"), dtype=np.uint8).copy()
            encoded[TEXT_PREFIX + key] = ms.Tensor(data)
        else:
            encoded[key] = value
    return encoded


def _decode_text(params: dict) -> dict:
    """The entries written by ``_encode_text`` back as text under their own names."""
    for name in [n for n in params if n.startswith(TEXT_PREFIX)]:
        value = params.pop(name)
        params[name[len(TEXT_PREFIX):]] = value.asnumpy().tobytes().decode("utf-8")
    return params


@contextlib.contextmanager
def _named_for(path: Path, fmt: str):
    """``path`` under a name ending in ``fmt``'s suffix, which MindSpore's loader requires
    (a link in a private temp folder when the file is named otherwise)."""
    if path.suffix == f".{fmt}":
        yield path
        return
    folder = Path(tempfile.mkdtemp(prefix="amptool-ckpt-"))
    try:
        named = folder / f"checkpoint.{fmt}"
        try:
            named.symlink_to(path.resolve())
        except OSError:
            shutil.copyfile(path, named)
        yield named
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_checkpoint(path: str | os.PathLike, items: list, meta: dict | None = None,
                     fmt: str = "ckpt") -> None:
    """Write ``items`` ([{name, data}]) and ``meta`` atomically: never a half-written file.

    safetensors holds tensors only, so text metadata goes there as UTF-8 bytes (read back
    as text by ``read_checkpoint``).
    """
    import mindspore as ms

    meta = dict(meta or {})
    if fmt == "safetensors":
        meta = _encode_text(meta)
    try:
        with atomic_path(path, suffix=".safetensors" if fmt == "safetensors" else ".ckpt") as tmp:
            ms.save_checkpoint(items, str(tmp), append_dict=meta or None, format=fmt)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}", "choose a writable path") from None


def state_items(net, optimizer, scaler_params) -> list:
    """Name/data entries of everything a resume needs, each parameter once."""
    seen, items = set(), []
    for param in list(net.get_parameters()) + list(optimizer.get_parameters()):
        if param.name not in seen:
            seen.add(param.name)
            items.append({"name": param.name, "data": param})
    for param in scaler_params:
        items.append({"name": SCALER_PREFIX + param.name, "data": param})
    return items


def meta_of(params: dict) -> dict:
    """The metadata entries (epoch, step, best_acc, ...) of a read checkpoint."""
    meta = {}
    for key in META_KEYS:
        if key in params:
            value = params[key]
            meta[key] = value.asnumpy().item() if hasattr(value, "asnumpy") else value
    return meta


def is_float(value) -> bool:
    import mindspore as ms

    return not isinstance(value, str) and value.dtype in (ms.float16, ms.float32, ms.float64,
                                                          ms.bfloat16)


def load_into_net(net, params: dict, source: str = "checkpoint") -> None:
    """Load weights into ``net``, casting float entries to each parameter's dtype.

    A checkpoint whose names or shapes do not fit the network is refused in one error.
    """
    import mindspore as ms

    missing, mismatched, fitted = [], [], {}
    for p in net.get_parameters():
        value = params.get(p.name)
        if value is None or isinstance(value, str):
            missing.append(p.name)
        elif tuple(value.shape) != tuple(p.shape):
            mismatched.append(f"{p.name} {tuple(value.shape)} vs {tuple(p.shape)}")
        else:
            if is_float(value) and value.dtype != p.dtype:
                value = ms.Parameter(value.astype(ms.float32).astype(p.dtype), name=p.name)
            fitted[p.name] = value
    if missing or mismatched:
        raise misfit_error(missing, mismatched, source)
    ms.load_param_into_net(net, fitted, strict_load=True)


def misfit_error(missing: list, mismatched: list, source: str) -> UsageError:
    """The one line for a checkpoint whose names or shapes do not fit the network."""
    what = []
    if missing:
        what.append(f"{len(missing)} missing parameter(s) (e.g. {', '.join(missing[:3])})")
    if mismatched:
        what.append(f"{len(mismatched)} shape mismatch(es) (e.g. {'; '.join(mismatched[:2])})")
    return UsageError(f"{source} does not fit the model: " + ", ".join(what),
                      "pass the --model the checkpoint was trained with")


def build_with_weights(spec, params: dict, source: str):
    """A fresh network of ``spec`` holding ``params``, in inference mode."""
    net = spec.build()
    load_into_net(net, params, source)
    net.set_train(False)
    return net


def restore_state(net, optimizer, scaler_params, params: dict, source: str) -> dict:
    """Restore network, optimizer and loss-scale state; return the saved metadata."""
    import mindspore as ms

    load_into_net(net, params, source)
    # The learning rate is configuration: a resumed run uses the one it is given.
    opt_params = {p.name: params[p.name] for p in optimizer.get_parameters()
                  if p.name in params and p.name != "learning_rate"}
    ms.load_param_into_net(optimizer, opt_params)
    for param in scaler_params:
        key = SCALER_PREFIX + param.name
        if key in params:
            param.set_data(params[key])
    return meta_of(params)
