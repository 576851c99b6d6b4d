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
in fp16 instead (on ``cellprobe.PROBE_ROWS`` rows), so its error is its cells' compounded;
a cell that hands on its input unchanged (an identity, dropout in inference) computes
nothing: 0, and neither does a cell the level keeps in fp32 (its probe would compute in
fp32 again): 0.
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

The pass runs the network eagerly (``amptool.precision.eager``) in inference mode (so does
``amptool.precision.forensics``, which names the first cell that overflows). A training run asks
for its batch normalizations on the batch's statistics, as its step computes them: a fresh
network's running statistics are no estimates yet, and through them values grow that no
training step makes (mindcv ``repvgg_a0`` at 3x64x64 reaches 1.06e5 there, 32 on batch
statistics).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from amptool.precision.apply import resolve_fp32_cells, within
from amptool.precision.cellprobe import Fp16Probe, is_chain, own_leaf, relative_error
from amptool.precision.eager import Hooks, eager, flat64, tensors
from amptool.precision.safety import FP16_MAX, FP16_TINY, LOCAL_ERROR, SAFETY

SUBNORMAL_SHARE = 0.5
"""Default share of nonzero outputs below FP16_TINY that makes a cell a candidate."""


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


class _Frame:
    """One cell call under way in the fp32 pass: the calls its construct made (cell, output)
    and the paths of every cell called inside it."""

    __slots__ = ("calls", "inner")

    def __init__(self):
        self.calls: list = []
        self.inner: set = set()


class _Tally:
    """One cell's sums over the pass: largest |output| and |first input|, its nonzero
    outputs and those below FP16_TINY."""

    __slots__ = ("out_max", "in_max", "tiny", "nonzero")

    def __init__(self):
        self.out_max, self.in_max, self.tiny, self.nonzero = 0.0, None, 0, 0


class _RangePass:
    """The pass's hooks and what they record, cell path by cell path."""

    def __init__(self, probe: bool, fp32_kept: tuple):
        self.probe = probe
        self.fp16 = Fp16Probe(fp32_kept)
        self.tallies: dict = {}
        self.types: dict = {}
        self.errors: dict = {}
        self.chains: dict = {}
        self.ids: dict = {}
        self.overflowing: set = set()
        self.frames: list = []
        self.recent: list = []  # (tensor, array, magnitudes) of the last tensors on the host
        self.rows = 0

    def measure(self, net, batches: list, batch_stats: bool) -> list:
        """Run ``net`` over ``batches`` with the hooks on: its ``CellRange`` rows."""
        import mindspore as ms

        first = batches[0] if batches else None
        self.rows = len(first[0]) if first and np.ndim(first[0]) else 0
        hooks = Hooks(net, self.record, self.enter)
        try:
            with eager(net, batch_stats):
                for batch in batches:
                    self.frames.clear()
                    net(*[ms.Tensor(a) for a in batch])
                    self.recent.clear()
        finally:
            hooks.close()
        return [CellRange(path, self.types[path], t.out_max, t.in_max,
                          t.tiny / t.nonzero if t.nonzero else 0.0, self.errors.get(path),
                          self.chains[path], self.ids[path] in self.overflowing)
                for path, t in self.tallies.items()]

    def host(self, tensor) -> tuple:
        """``tensor`` on the host and its magnitudes (None when not floating); a cell's
        input is mostly an output just copied, and an identity's output is its input."""
        for held, array, mags in self.recent:
            if held is tensor:
                return array, mags
        array = tensor.asnumpy()
        mags = magnitudes(array) if np.issubdtype(array.dtype, np.floating) else None
        self.recent.append((tensor, array, mags))
        if len(self.recent) > 8:
            self.recent.pop(0)
        return array, mags

    def how_probed(self, cell, inputs, output, frame) -> str:
        """'identity' (a cell that hands on its input), 'whole' (a block whose inner cells'
        errors add up to LOCAL_ERROR), 'kept' (a cell of ``fp32_kept``: its probe would
        compute in fp32 what it just computed, error 0) or 'own' (``own_output``)."""
        ins = tensors(inputs)
        if not frame.calls and ins and output is ins[0]:
            return "identity"
        inner = sum(self.errors[p] for p in frame.inner if self.errors.get(p) is not None)
        if frame.calls and inner >= LOCAL_ERROR and not is_chain(cell):
            return "whole"
        return "kept" if id(cell) in self.fp16.kept_ids else "own"

    def local_error(self, cell, inputs, outs, how, low):
        """The cell's relative error computing in fp16 (``low``: its ``own_output``)."""
        if how == "identity":
            return 0.0  # it hands on its input: nothing of its own computes
        if how == "whole":
            return self.fp16.whole_error(cell, inputs, outs, self.rows)
        if how == "kept":
            error = 0.0
        else:
            error = None if low is None else relative_error(low, flat64(outs))
        if error is not None and np.isfinite(error) and own_leaf(cell):
            if self.fp16.grad_overflow(cell, inputs):
                self.overflowing.add(id(cell))
        return error

    def enter(self, path, cell, inputs):
        if not self.fp16.active:
            self.frames.append(_Frame())

    def record(self, path, cell, inputs, output):
        if self.fp16.active:  # a cell inside the one being probed
            return
        frame = self.frames.pop()
        if self.frames:
            self.frames[-1].calls.append((cell, output))
            self.frames[-1].inner |= frame.inner
            self.frames[-1].inner.add(path)
        how = low = None
        if self.probe and path and path not in self.errors:
            how = self.how_probed(cell, inputs, output, frame)
            if how == "own":  # before the copies below, which then wait for both at once
                low = self.fp16.own_output(cell, inputs, frame.calls)
        hosted = [h for h in map(self.host, tensors(output)) if h[1] is not None]
        if not hosted:
            return
        top = self.tally(path, cell, inputs, hosted)
        if how is not None and np.isfinite(top):
            outs = [array for array, _ in hosted]
            self.errors[path] = self.local_error(cell, inputs, outs, how, low)

    def tally(self, path, cell, inputs, hosted) -> float:
        """Add the cell's call (its outputs ``hosted``) to its sums; the call's largest
        |output|."""
        tops = [mags[0] for _, mags in hosted]
        top = float("inf") if float("inf") in tops else max(tops, default=0.0)
        row = self.tallies.setdefault(path, _Tally())
        row.out_max = max(row.out_max, top)
        first_in = tensors(inputs)[:1]
        array, mags = self.host(first_in[0]) if first_in else (None, None)
        if mags is not None and array.size:
            row.in_max = mags[0] if row.in_max is None else max(row.in_max, mags[0])
        row.tiny += sum(mags[1] for _, mags in hosted)
        row.nonzero += sum(mags[2] for _, mags in hosted)
        self.types[path] = type(cell).__name__
        self.chains[path] = is_chain(cell)
        self.ids[path] = id(cell)
        return top


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
    return _RangePass(probe, fp32_kept).measure(net, batches, batch_stats)


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


def outside_policy(net, found: list, policy) -> list:
    """``found`` (``CellRange`` rows) less the cells ``policy`` keeps in fp32 already, or
    holds inside one (BatchNorm and LayerNorm at O2), and the cells it forces to low
    precision."""
    kept = list(resolve_fp32_cells(net, policy))
    return [r for r in found
            if r.path not in policy.fp16_cells and not any(within(r.path, k) for k in kept)]
