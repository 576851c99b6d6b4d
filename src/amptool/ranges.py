"""The range pass: what each cell's fp32 values mean for fp16, and where fp16 first breaks.

One eager fp32 forward pass over a few batches records, for every cell (blocks included:
a block's own ``construct`` holds operations, such as a residual or branch sum, that no
leaf covers), the largest |value| of its input and output and the share of its nonzero
outputs below fp16's smallest normal number. During that pass every cell but the network
itself is also run once more on the same fp32 inputs computing in fp16 (``to_float``, as a
policy would set it), the cells its construct calls handing on their fp32 outputs (cast to
fp16) instead of computing again (unless a value they are given is not finite); the
relative L2 error of that output against the fp32 one is its ``local_error``: it sees what
the output's magnitude cannot, an intermediate value inside the cell's own construct (a sum
of squares) or an input fp16 cannot hold.
Probing each construct once makes all probes together about one fp16 forward pass, however
deep the network. A block whose inner cells' errors add up to ``LOCAL_ERROR`` is run whole
in fp16 instead (on PROBE_ROWS rows), so its error is its cells' compounded; a cell that
hands on its input unchanged (an identity, dropout in inference) computes nothing: 0, and
neither does a cell the level keeps in fp32 (its probe would compute in fp32 again): 0.
A leaf cell (one that holds no other) of the user's own (not a MindSpore layer) is also
differentiated there, in fp16 and, when that gradient is not finite, in fp32:
``grad_overflow`` is a backward that fp16 cannot hold while the forward can (the
derivative of ``rsqrt`` of a small mean square).

Cells to keep in fp32 (``range_candidates``): where a value beyond a safety fraction of
fp16's largest value is made (the innermost cell whose output reaches it while its inputs
do not: keeping a block keeps its own construct) and every cell it then flows into; cells
whose outputs live mostly among fp16's subnormals; and cells whose ``local_error`` reaches
``LOCAL_ERROR`` while none of the cells they hold does (the innermost: an fp16 leaf breaks
every block around it).

The pass runs the network eagerly (``amptool.eager``) in inference mode (so does
``amptool.forensics``, which names the first cell that overflows). A training run asks
for its batch normalizations on the batch's statistics, as its step computes them: a fresh
network's running statistics are no estimates yet, and through them values grow that no
training step makes (mindcv ``repvgg_a0`` at 3x64x64 reaches 1.06e5 there, 32 on batch
statistics).
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from amptool.eager import (Hooks, all_finite, computing_in, eager, flat64, floats, replaying,
                           tensors)

FP16_MAX = 65504.0
"""Largest finite float16."""
FP16_TINY = 2.0 ** -14
"""Smallest normal float16 (6.1e-5): below it fp16 keeps fewer significant bits."""
SAFETY = 0.5
"""Default share of FP16_MAX an fp32 output may reach before its cell is kept in fp32."""
SUBNORMAL_SHARE = 0.5
"""Default share of nonzero outputs below FP16_TINY that makes a cell a candidate."""
LOCAL_ERROR = 0.1
"""Relative L2 error of a cell computing in fp16 on fp32 inputs that makes it a candidate.
fp16 rounding alone gives about 1e-3 (a deep block a few times more); 0.1 is a cell that
no longer computes the same thing."""
PROBE_ROWS = 4
"""Rows of the first batch a block run whole in fp16 is probed on, where all its tensor
inputs share the batch's leading dimension (else it is probed on its whole inputs)."""


def magnitudes(values) -> tuple:
    """(largest |value| (inf when one is not finite), number of nonzero values below
    FP16_TINY, number of nonzero values) of float arrays (one array or a list of them),
    computed in their own precision: no float64 copy of every cell's output."""
    top, tiny, nonzero = 0.0, 0, 0
    for array in values if isinstance(values, list) else [values]:
        mag = np.abs(np.asarray(array).ravel())
        if not mag.size:
            continue
        peak = float(mag.max())
        top = float("inf") if not np.isfinite(peak) or top == float("inf") else max(top, peak)
        count = int(np.count_nonzero(mag))
        nonzero += count
        tiny += count - int(np.count_nonzero(mag >= FP16_TINY)) if count else 0
    return top, tiny, nonzero


def fp16_risk(out_max: float, subnormal: float, safety: float = SAFETY,
              subnormal_share: float = SUBNORMAL_SHARE,
              local: Optional[float] = None) -> Optional[str]:
    """"overflow" when fp32 values reach ``safety`` x 65504 (or are not finite), "subnormal"
    when most nonzero values are below fp16's smallest normal, "fp16 error" when the cell
    computing in fp16 (``local``: its relative error) reaches LOCAL_ERROR, else None."""
    if not np.isfinite(out_max) or out_max >= safety * FP16_MAX:
        return "overflow"
    if subnormal > subnormal_share:
        return "subnormal"
    if local is not None and local >= LOCAL_ERROR:
        return "fp16 error"
    return None


@dataclass(frozen=True)
class CellRange:
    """One cell's fp32 magnitudes over the range pass."""

    path: str
    type: str
    out_max: float
    """Largest |output| (inf or nan when the fp32 output itself is not finite)."""
    in_max: Optional[float]
    """Largest |first input| (None when the cell took no tensor)."""
    subnormal: float
    """Share of nonzero |output| values below FP16_TINY."""
    local_error: Optional[float] = None
    """Relative L2 error of the cell computing in fp16 on the same fp32 inputs (inf when
    that output is not finite; None when not probed or the cell cannot run in fp16)."""
    chain: bool = False
    """The cell only calls its sub-cells one after another (``nn.SequentialCell``)."""
    grad_overflow: bool = False
    """A leaf cell of the user's own whose gradient with respect to its float inputs is not
    finite computing in fp16 while it is in fp32 (a backward that overflows: the derivative
    of ``rsqrt`` of a small mean square in a hand-written RMS normalization)."""

    def to_dict(self) -> dict:
        return asdict(self)


def _chain(cell) -> bool:
    """True for a cell whose construct only calls its sub-cells one after another
    (``nn.SequentialCell``): it makes no value of its own."""
    from mindspore import nn

    return (type(cell).construct is nn.SequentialCell.construct
            and bool(getattr(cell, "_cells", None)))


def relative_error(low: np.ndarray, ref: np.ndarray) -> float:
    """||low - ref|| / ||ref|| in float64; inf when ``low`` is not finite where ``ref`` is."""
    low, ref = np.asarray(low, np.float64), np.asarray(ref, np.float64)
    if low.shape != ref.shape or not np.all(np.isfinite(low)):
        return float("inf")
    scale = float(np.linalg.norm(ref))
    diff = float(np.linalg.norm(low - ref))
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


class _Frame:
    """One cell call under way in the fp32 pass: the calls its construct made (cell, output)
    and the paths of every cell called inside it."""

    __slots__ = ("calls", "inner")

    def __init__(self):
        self.calls: list = []
        self.inner: set = set()


def measure_ranges(net, batches: list, probe: bool = True, batch_stats: bool = False,
                   fp32_kept: tuple = ()) -> list:
    """``CellRange`` of every cell of the fp32 network ``net`` over ``batches`` (each a list
    of numpy arrays, one per network input), in execution order; with ``probe``, each cell
    but the network itself also runs in fp16 on its inputs from the first batch, giving
    ``local_error``: the cells its construct calls hand on their fp32 outputs (cast to
    fp16) instead of computing again, so the probes of all cells together cost about one
    fp16 forward pass; a cell whose inner cells' errors add up to ``LOCAL_ERROR`` runs whole
    in fp16 instead (its error compounded, on the first PROBE_ROWS rows). The cells of
    ``fp32_kept`` (those a policy keeps) stay in fp32 inside a probe. ``batch_stats``: batch
    normalizations as a training step runs them (``eager``); else as inference does."""
    import mindspore as ms

    kept_ids = {id(c) for c in fp32_kept}
    kept_all = frozenset(id(c) for k in fp32_kept for _, c in k.cells_and_names())

    stats: dict = {}
    types: dict = {}
    errors: dict = {}
    chains: dict = {}
    probing: list = []
    overflowing: set = set()
    ids: dict = {}
    frames: list = []
    recent: list = []  # (tensor, array, magnitudes) of the last tensors copied to the host

    def host(tensor) -> tuple:
        """``tensor`` on the host and its magnitudes (None when not floating); a cell's
        input is mostly an output just copied, and an identity's output is its input."""
        for held, array, mags in recent:
            if held is tensor:
                return array, mags
        array = tensor.asnumpy()
        mags = magnitudes(array) if np.issubdtype(array.dtype, np.floating) else None
        recent.append((tensor, array, mags))
        if len(recent) > 8:
            recent.pop(0)
        return array, mags

    @contextlib.contextmanager
    def in_fp16(cell):
        """``cell`` computing in fp16, the kept cells inside it in fp32."""
        with computing_in(cell, ms.float16):
            for _, inner in cell.cells_and_names():
                if id(inner) in kept_ids:
                    inner.to_float(ms.float32)
            yield

    def own_output(cell, inputs, calls):
        """The cell computing in fp16 on its fp32 inputs, the cells its construct calls
        handing on their recorded fp32 outputs: its output (float64, flat), or None."""
        keep = kept_all if id(cell) not in kept_all else frozenset(id(c) for c, _ in calls)
        given: list = []
        probing.append(cell)
        try:
            try:  # the calls hand on their outputs unchecked, what they were given checked after
                with in_fp16(cell), replaying(calls, ms.float16, keep, given):
                    low = floats(cell(*inputs))
                checked = all_finite(given)
            except (RuntimeError, TypeError, ValueError):
                checked = False
            if not checked:  # a call was given what fp16 cannot hold: it computes there
                with in_fp16(cell), replaying(calls, ms.float16, keep):
                    low = floats(cell(*inputs))
        except (RuntimeError, TypeError, ValueError):  # no fp16 kernel, dtype rules
            return None
        finally:
            probing.pop()
        return low

    def whole_error(cell, inputs, outs, rows):
        """The cell computing whole in fp16 on (the first PROBE_ROWS rows of) its inputs.
        The fp32 side is the rows of the output already at hand; a cell that mixes rows
        would differ there, so a flagging error is confirmed against the cell run in fp32
        on the same rows."""
        cut = rows > PROBE_ROWS and all(t.shape and t.shape[0] == rows for t in tensors(inputs))
        probing.append(cell)
        try:
            if cut:
                inputs = tuple(v[:PROBE_ROWS] if isinstance(v, ms.Tensor) else v for v in inputs)
            with in_fp16(cell):
                low = floats(cell(*inputs))
            if low is None:
                return None
            ref = flat64([a[:PROBE_ROWS] if cut else a for a in outs])
            if cut and not all(a.shape and a.shape[0] == rows for a in outs):
                ref = None
            error = None if ref is None else relative_error(low, ref)
            if error is None or error >= LOCAL_ERROR:
                error = relative_error(low, floats(cell(*inputs)))
        except (RuntimeError, TypeError, ValueError):  # no fp16 kernel, dtype rules
            return None
        finally:
            probing.pop()
        return error

    def how_probed(cell, inputs, output, frame) -> str:
        """'identity' (a cell that hands on its input), 'whole' (a block whose inner cells'
        errors add up to LOCAL_ERROR), 'kept' (a cell of ``fp32_kept``: its probe would
        compute in fp32 what it just computed, error 0) or 'own' (``own_output``)."""
        ins = tensors(inputs)
        if not frame.calls and ins and output is ins[0]:
            return "identity"
        inner = sum(errors[p] for p in frame.inner if errors.get(p) is not None)
        if frame.calls and inner >= LOCAL_ERROR and not _chain(cell):
            return "whole"
        return "kept" if id(cell) in kept_ids else "own"

    def local_error(cell, inputs, outs, how, low):
        """The cell's relative error computing in fp16 (``low``: its ``own_output``)."""
        if how == "identity":
            return 0.0  # it hands on its input: nothing of its own computes
        if how == "whole":
            return whole_error(cell, inputs, outs, rows)
        if how == "kept":
            error = 0.0
        else:
            error = None if low is None else relative_error(low, flat64(outs))
        if error is not None and np.isfinite(error) and _own_leaf(cell):
            probing.append(cell)  # its gradient's forward is no cell to record
            try:
                if _grad_overflows(cell, inputs):
                    overflowing.add(id(cell))
            except (RuntimeError, TypeError, ValueError):  # no fp16 kernel, dtype rules
                pass
            finally:
                probing.pop()
        return error

    def enter(path, cell, inputs):
        if not probing:
            frames.append(_Frame())

    def record(path, cell, inputs, output):
        if probing:  # a cell inside the one being probed
            return
        frame = frames.pop()
        if frames:
            frames[-1].calls.append((cell, output))
            frames[-1].inner |= frame.inner
            frames[-1].inner.add(path)
        how = low = None
        if probe and path and path not in errors:
            how = how_probed(cell, inputs, output, frame)
            if how == "own":  # before the copies below, which then wait for both at once
                low = own_output(cell, inputs, frame.calls)
        hosted = [h for h in map(host, tensors(output)) if h[1] is not None]
        if not hosted:
            return
        outs = [array for array, _ in hosted]
        tops = [mags[0] for _, mags in hosted]
        top = float("inf") if float("inf") in tops else max(tops, default=0.0)
        row = stats.setdefault(path, [0.0, None, 0, 0])
        row[0] = max(row[0], top)
        first_in = tensors(inputs)[:1]
        array, mags = host(first_in[0]) if first_in else (None, None)
        if mags is not None and array.size:
            row[1] = mags[0] if row[1] is None else max(row[1], mags[0])
        row[2] += sum(mags[1] for _, mags in hosted)
        row[3] += sum(mags[2] for _, mags in hosted)
        types[path] = type(cell).__name__
        chains[path] = _chain(cell)
        ids[path] = id(cell)
        if how is not None and np.isfinite(top):
            errors[path] = local_error(cell, inputs, outs, how, low)

    rows = len(batches[0][0]) if batches and batches[0] and np.ndim(batches[0][0]) else 0
    hooks = Hooks(net, record, enter)
    try:
        with eager(net, batch_stats):
            for batch in batches:
                frames.clear()
                net(*[ms.Tensor(a) for a in batch])
                recent.clear()
    finally:
        hooks.close()
    return [CellRange(path, types[path], row[0], row[1], row[2] / row[3] if row[3] else 0.0,
                      errors.get(path), chains[path], ids[path] in overflowing)
            for path, row in stats.items()]


def _own_leaf(cell) -> bool:
    """A cell holding no other whose class is not MindSpore's own: arithmetic written by
    hand (MindSpore's layers are either white-listed or kept in fp32 by the levels)."""
    return not cell._cells and not type(cell).__module__.startswith("mindspore.")


def _grad_overflows(cell, inputs) -> bool:
    """Whether the gradient of ``cell``'s outputs (summed) with respect to its float tensor
    inputs is not finite computing in fp16 but finite in fp32 (``cell`` computes in fp32)."""
    import mindspore as ms

    where = tuple(i for i, v in enumerate(inputs)
                  if isinstance(v, ms.Tensor) and v.dtype in (ms.float32, ms.float16))
    if not where:
        return False

    def finite() -> bool:
        grads = ms.grad(cell, grad_position=where)(*inputs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return all(np.isfinite(g.asnumpy()).all() for g in grads)

    with computing_in(cell, ms.float16):
        if finite():
            return False
    return finite()


def _inside(path: str, outer: str) -> bool:
    return outer != path and (not outer or path.startswith(outer + "."))


def _big(value, limit: float) -> bool:
    return value is not None and (not np.isfinite(value) or value >= limit)


def _innermost(rows: list) -> list:
    return [r for r in rows if not any(_inside(o.path, r.path) for o in rows)]


def range_candidates(ranges: list, safety: float = SAFETY,
                     subnormal_share: float = SUBNORMAL_SHARE,
                     local_error: Optional[float] = LOCAL_ERROR) -> list:
    """The cells to keep in fp32, in execution order (never the network itself, nor a cell
    inside another candidate). With limit = ``safety`` x 65504:

    - where a value fp16 cannot hold is made: the cells whose outputs reach the limit (or
      are not finite in fp32 either) while their inputs do not, unless a cell inside them
      made it: a chain (``nn.SequentialCell``) whose blocks grow a value past the limit is
      not kept whole (the block where it crosses is, and those that take it in), nor a
      cell inside which one already gives an output as large; a block whose own construct
      makes it larger (a branch sum) is;
    - where it is taken in: the outermost cells whose inputs reach the limit, since a kept
      cell hands its fp32 output on and a consumer computing in fp16 would cast it to inf;
    - the innermost cells whose outputs are mostly subnormal in fp16 (``subnormal_share``);
    - the innermost cells whose fp16 ``local_error`` reaches ``local_error`` (None: not
      used), an overflow that stays inside a cell; never a chain, which computes nothing of
      its own (its error is its blocks' errors compounded);
    - the leaf cells whose gradient overflows in fp16 (``grad_overflow``)."""
    limit = safety * FP16_MAX
    rows = [r for r in ranges if r.path]
    made = [r for r in rows if _big(r.out_max, limit) and not _big(r.in_max, limit)]
    made = [r for r in made  # not a cell that passes on what a cell inside it made
            if not (r.chain and any(_inside(d.path, r.path) for d in made))
            and not any(_inside(d.path, r.path) and d.out_max >= r.out_max for d in made)]
    taken = [r for r in rows if _big(r.in_max, limit)]
    taken = [r for r in taken if not any(_inside(r.path, o.path) for o in taken)]
    tiny = _innermost([r for r in rows if not _big(r.out_max, limit)
                       and fp16_risk(r.out_max, r.subnormal, safety, subnormal_share)])
    broken = _innermost([r for r in rows if r.grad_overflow or (
        local_error is not None and not r.chain and r.local_error is not None
        and r.local_error >= local_error)])
    chosen = {r.path for r in made + taken + tiny + broken}
    found = [r for r in rows if r.path in chosen]
    return [r for r in found if not any(_inside(r.path, o.path) for o in found)]


def why_kept(row: dict, safety: float = SAFETY) -> str:
    """Why the range pass keeps the cell of ``row`` (a ``CellRange.to_dict()``), in words."""
    limit = safety * FP16_MAX
    if not np.isfinite(row["out_max"]) or row["out_max"] >= limit:
        return f"fp32 outputs up to {row['out_max']:.4g}"
    if row.get("in_max") is not None and (not np.isfinite(row["in_max"])
                                          or row["in_max"] >= limit):
        return f"fp32 inputs up to {row['in_max']:.4g}"
    if row.get("local_error") is not None and row["local_error"] >= LOCAL_ERROR:
        return f"computing alone in fp16 it is off by {row['local_error']:.3g} (relative L2)"
    if row.get("grad_overflow"):
        return "its gradient overflows in fp16 (finite in fp32)"
    return f"{row['subnormal']:.0%} of its outputs below fp16's smallest normal"


def outside_policy(net, found: list, policy) -> list:
    """``found`` (``CellRange`` rows) less the cells ``policy`` keeps in fp32 already, or
    holds inside one (BatchNorm and LayerNorm at O2), and the cells it forces to low
    precision."""
    from amptool.precision import resolve_fp32_cells, within

    kept = list(resolve_fp32_cells(net, policy))
    return [r for r in found
            if r.path not in policy.fp16_cells and not any(within(r.path, k) for k in kept)]
