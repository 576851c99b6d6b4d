"""Checkpoint precision conversion: fp32 <-> fp16 for MindSpore ckpt and safetensors files.

Float entries are cast to the target dtype; integer, boolean and string entries are
copied untouched. Converting to fp16 keeps in fp32 the parameters of the cells the
policy keeps in fp32 (unless ``all_floats``) and any entry whose values lie beyond
fp16's range (they would become inf, e.g. a loss scale of 65536).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from amptool.errors import UsageError
from amptool.files.fileio import atomic_path
from amptool.network.checkpoint import is_float, write_checkpoint
from amptool.network.ckptstream import build_uninitialized, iter_checkpoint, write_entry
from amptool.network.models import resolve_model
from amptool.network.trust import recorded_reference, user_reference
from amptool.precision import apply
from amptool.precision.policy import policy_for
from amptool.precision.safety import FP16_MAX
from amptool.runs.rundir import RunDir
from amptool.runtime.device import import_mindspore

from .config import CkptConfig, output_format, validate

__all__ = ["CkptConfig", "CkptReport", "convert_checkpoint"]


@dataclass
class CkptReport:
    """What a conversion did."""

    src: str
    dst: str
    to: str
    format: str
    policy: str
    bytes_before: int
    bytes_after: int
    converted: list = field(default_factory=list)
    kept_policy: list = field(default_factory=list)
    kept_range: list = field(default_factory=list)
    untouched: list = field(default_factory=list)
    dropped: list = field(default_factory=list)
    underflow: int = 0
    underflow_entries: list = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.bytes_after / self.bytes_before if self.bytes_before else 0.0

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["ratio"] = self.ratio
        return d


def _as_float32(value) -> np.ndarray:
    import mindspore as ms

    if value.dtype == ms.bfloat16:
        return value.astype(ms.float32).asnumpy()
    return value.asnumpy().astype(np.float32, copy=False)


def _model_name(cfg: CkptConfig, entries: dict) -> Optional[str]:
    saved = entries.get("model")
    return cfg.model or (saved if isinstance(saved, str) else None)


def _reference(cfg: CkptConfig, model: str) -> dict:
    """The user's model as given; else the checkpoint's, with the factory arguments and
    signature its run.json records where that names the same model (vetted either way)."""
    if cfg.model:
        given = user_reference(cfg.model, cfg.model_args, cfg.input_spec)
        assert given is not None  # a model was named
        return given
    run_dir = RunDir(Path(cfg.src).parent)
    try:
        info = run_dir.read_optional()
    except UsageError:  # a run.json that is not ours: the checkpoint's own entry alone
        info = None
    if info is not None and info.settings.model == model:
        return run_dir.model_reference(info)
    return recorded_reference({"model": model}, None, f"the metadata of {cfg.src}",
                              Path(cfg.src).parent)


def _plan(cfg: CkptConfig, entries: dict) -> tuple[set, Optional[set], str]:
    """Names the policy keeps fp32, network parameter names (None: unknown), policy text."""
    model = _model_name(cfg, entries)
    if model is None:
        if cfg.policy or cfg.weights_only:
            raise UsageError(f"{'--policy' if cfg.policy else '--weights-only'} needs the network",
                             "pass --model (the network the checkpoint belongs to)")
        what = "every float entry converted" if cfg.to == "fp16" else "none"
        return set(), None, f"none (no model known: {what})" if cfg.to == "fp16" else "none"
    policy = policy_for(cfg.policy)
    # the structure alone is read (parameter names, the cells the policy keeps): built
    # without weights and never run, so a big network costs no copy of its weights here
    reference = _reference(cfg, model)
    spec = build_uninitialized(lambda: resolve_model(reference, probe=False, signature=False))
    net = build_uninitialized(spec.build)
    weights = {p.name for p in net.get_parameters()}
    if cfg.to != "fp16":
        return set(), weights, "none"
    if cfg.all_floats:
        return set(), weights, "none (--all)"
    kept = apply.resolve_fp32_cells(net, policy)  # read at call time: tests replace it
    names = {p.name for cell in kept.values() for p in cell.get_parameters()}
    return names, weights, f"{policy.describe()} on {model}"


def _kept_by_policy(name: str, kept: set) -> bool:
    """A kept parameter, or optimizer state of one (``moment1.<name>``)."""
    return name in kept or any(name.endswith("." + k) for k in kept)


def convert_checkpoint(cfg: CkptConfig) -> CkptReport:
    """Convert the float entries of ``cfg.src`` to ``cfg.to`` and write ``cfg.dst`` atomically."""
    validate(cfg)
    fmt = output_format(cfg)
    ms = import_mindspore()
    # the input is read one entry at a time (its 'model' entry first, for the plan); each
    # converted entry is written in turn (ckpt), or held until the whole is (safetensors)
    kept, weights, policy_text = _plan(cfg, dict(iter_checkpoint(cfg.src, {"model"}.__contains__)))
    target = ms.float16 if cfg.to == "fp16" else ms.float32
    report = CkptReport(cfg.src, cfg.dst, cfg.to, fmt, policy_text, os.path.getsize(cfg.src), 0)
    if fmt == "ckpt":
        _stream_ckpt(cfg, target, kept, weights, report)
    else:
        _write_whole(cfg, target, kept, weights, report)
    report.bytes_after = os.path.getsize(cfg.dst)
    return report


def _entries(cfg: CkptConfig, target, kept: set, weights, report: CkptReport):
    """(name, converted tensor or text) of every entry the output keeps, in file order."""
    for name, value in iter_checkpoint(cfg.src):
        if cfg.weights_only and name not in weights:
            report.dropped.append(name)
            continue
        if isinstance(value, str):
            yield name, value
            continue
        yield name, _convert_entry(name, value, target, kept, report)
        del value


def _stream_ckpt(cfg: CkptConfig, target, kept: set, weights, report: CkptReport) -> None:
    """Each entry written as it is converted (the texts last, as ``save_checkpoint`` writes
    its ``append_dict``): one entry in memory at a time, never the whole output."""
    strings = {}
    try:
        with atomic_path(cfg.dst, suffix=".ckpt") as tmp, open(tmp, "wb") as fh:
            for name, value in _entries(cfg, target, kept, weights, report):
                if isinstance(value, str):
                    strings[name] = value
                    report.untouched.append(name)
                    continue
                write_entry(fh, name, value.shape, str(value.dtype), value.asnumpy())
                del value
            for name, text in strings.items():
                write_entry(fh, name, [0], "str", np.array(text).tobytes())
    except OSError as exc:
        raise UsageError(f"cannot write {cfg.dst}: {exc.strerror}",
                         "choose a writable path") from None


def _write_whole(cfg: CkptConfig, target, kept: set, weights, report: CkptReport) -> None:
    """safetensors (tensors only: texts are dropped): the converted entries held, then
    written by MindSpore at once."""
    items = []
    for name, value in _entries(cfg, target, kept, weights, report):
        if isinstance(value, str):
            report.dropped.append(name)
            continue
        items.append({"name": name, "data": value})
    write_checkpoint(cfg.dst, items, None, "safetensors")


def _convert_entry(name: str, value, target, kept: set, report: CkptReport):
    import mindspore as ms

    if not is_float(value):
        report.untouched.append(name)
        return value
    if target == ms.float16 and _kept_by_policy(name, kept):
        report.kept_policy.append(name)
        return ms.Tensor(_as_float32(value)) if value.dtype != ms.float32 else value
    arr = _as_float32(value)
    if target == ms.float16:
        if _beyond_fp16(arr):
            report.kept_range.append(name)
            return ms.Tensor(arr)
        half = arr.astype(np.float16)
        flushed = _flushed(arr, half)
        if flushed:
            report.underflow += flushed
            report.underflow_entries.append(name)
        report.converted.append(name)
        return ms.Tensor(half)
    report.converted.append(name)
    return ms.Tensor(arr)


CHUNK = 1 << 20
"""Elements checked at a time: an entry's checks hold a few MB, not copies of the entry."""


def _chunks(*arrays):
    """The same slices of each array, flattened, ``CHUNK`` elements at a time."""
    flat = [a.reshape(-1) for a in arrays]
    for start in range(0, flat[0].size, CHUNK):
        yield [f[start:start + CHUNK] for f in flat]


def _beyond_fp16(arr: np.ndarray) -> bool:
    """Whether a finite value of ``arr`` lies beyond fp16's range."""
    for (part,) in _chunks(arr):
        magnitude = np.abs(part)
        magnitude[~np.isfinite(magnitude)] = 0
        if magnitude.size and float(magnitude.max()) > FP16_MAX:
            return True
    return False


def _flushed(arr: np.ndarray, half: np.ndarray) -> int:
    """How many nonzero values of ``arr`` became zero in ``half``."""
    return sum(int(((h == 0) & (a != 0)).sum()) for a, h in _chunks(arr, half))
