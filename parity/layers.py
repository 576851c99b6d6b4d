"""Per-layer localization: which cell's output first drifts from fp32, and is it born there.

The network runs eagerly (PyNative; forward hooks do nothing in GRAPH_MODE) twice on the
same samples, a chunk of ``CHUNK`` samples at a time (one call each at the default 32): in
fp32 with the reference's weights, keeping each cell's values of the chunk, then under the
candidate's precision policy with the candidate's weights, comparing each cell's values
with the reference's and keeping only the sums the metrics need. Hooks sit on the original
cell objects, found by path before ``apply_policy`` wraps the cells it keeps in fp32, so
paths stay those of the model.
One network is made per precision (the second a copy of the first) and reused for every
candidate.
"""
from __future__ import annotations

import json
from typing import Optional

import numpy as np

from amptool.errors import UsageError
from amptool.network.ckptstream import build_uninitialized
from amptool.network.models import resolve_model
from amptool.precision.apply import apply_policy, cell_paths, low_precision_params
from amptool.precision.ranges import FP16_TINY, fp16_risk

INPUT_ROW = "(input)"
OUTPUT_ROW = "(output)"
CHUNK = 32
"""Samples run through each network in one call: the per-layer default, in one forward."""
PENDING_BYTES = 64 << 20
"""Reference values (bytes) the candidate's hooks hold awaiting comparison before they are
compared (see ``_Capture``)."""


class _Capture:
    """A network with forward hooks on every cell. Run as the reference, it keeps each
    cell's first input and output of one chunk (host copies, float32); run as the
    candidate, it compares each cell's with the reference's (``_Pair``) and drops the
    reference's, so one chunk of reference values is held at a time.

    A hook only holds on to the tensors it sees; they are copied to the host and compared
    in execution order when the forward pass is done, or on the candidate as soon as the
    reference values awaiting comparison reach ``PENDING_BYTES`` (a copy waits for the
    tensor to be computed, and eager ops run ahead of Python: copying in each hook would
    wait once per cell)."""

    def __init__(self, net, policy):
        self.net = net
        self.paths = cell_paths(self.net)
        self.types = {p: type(c).__name__ for p, c in self.paths.items()}
        self.order: list = []
        self.dtypes: dict = {}
        self.calls: dict = {}
        self.ref: Optional[dict] = None
        self.kept: dict = {}
        self.pairs: dict = {}
        self.recent: list = []
        self.sums: dict = {}
        self.pending: list = []
        self.pending_bytes = 0
        for path, cell in self.paths.items():
            cell.register_forward_hook(self._hook(path or OUTPUT_ROW))
        if policy is not None:  # its weights stored as the fp16 artefact stores them
            import mindspore as ms

            for param in low_precision_params(self.net, policy):
                param.set_dtype(ms.float16)
        self.runnable = apply_policy(self.net, policy) if policy is not None else self.net
        self.runnable.set_train(False)

    def _hook(self, path):
        def hook(cell, inputs, output):
            n = self.calls.get(path, 0)
            self.calls[path] = n + 1
            key = path if n == 0 else f"{path}#{n + 1}"
            if self.ref is None:  # the reference: keep this chunk's values
                self.pending.append((key, output, _first_tensor(inputs)))
            elif key in self.ref:  # the candidate: compare, then drop the reference's
                self.pending.append((key, output, _first_tensor(inputs)))
                self.pending_bytes += sum(a.nbytes for a in self.ref[key] if a is not None)
                if self.pending_bytes >= PENDING_BYTES:
                    self._flush()
        return hook

    def _flush(self) -> None:
        """Copy the held tensors to the host, in the order the hooks saw them: kept (the
        reference) or compared with the reference's and dropped (the candidate)."""
        pending, self.pending, self.pending_bytes = self.pending, [], 0
        for key, output, first_in in pending:
            out = self._host(output)
            if out is None:
                continue
            first_in = None if first_in is None else self._host(first_in)
            if key not in self.dtypes:
                self.order.append(key)
                self.dtypes[key] = str(_first_tensor(output).dtype).lower()
            if self.ref is None:
                self.kept[key] = (first_in, out)
            else:
                r_in, r_out = self.ref.pop(key)
                self.pairs.setdefault(key, _Pair()).add(r_out, out, r_in, first_in, self.sums)

    def _host(self, value) -> Optional[np.ndarray]:
        """``_flat(value)``, reusing the copy of a tensor just copied (a cell's input is
        mostly the output of the cell before it)."""
        for held, array in self.recent:
            if held is value:
                return array
        array = _flat(value)
        self.recent = self.recent[-7:] + [(value, array)]
        return array

    def load_weights(self, weights: dict, source: str) -> None:
        load_weights(self.net, weights, source)

    def keep(self, x: np.ndarray) -> dict:
        """Run ``x`` as the reference: path -> (first input, output) of this chunk."""
        import mindspore as ms

        self.ref, self.kept, self.calls, self.recent = None, {}, {}, []
        try:
            self.runnable(ms.Tensor(x))
            self._flush()
        finally:
            self.pending, self.pending_bytes, self.recent = [], 0, []
        kept, self.kept = self.kept, {}
        return kept

    def compare(self, x: np.ndarray, ref: dict, pairs: dict) -> None:
        """Run ``x`` as the candidate against the reference's values ``ref`` (consumed),
        adding each cell's comparison to ``pairs``."""
        import mindspore as ms

        self.ref, self.pairs, self.calls, self.recent = ref, pairs, {}, []
        try:
            self.runnable(ms.Tensor(x))
            self._flush()
        finally:
            self.ref, self.recent, self.pending, self.pending_bytes = None, [], [], 0
            self.sums = {}
            ref.clear()


class _Pair:
    """One cell's comparison accumulated over chunks: the sums and extremes the row's
    metrics come from (``compute_metrics``'s, in float64), nothing kept per value."""

    def __init__(self):
        self.size = self.nonfinite = self.tiny = self.nonzero = 0
        self.dot = self.rr = self.cc = self.dd = 0.0
        self.max_abs = self.max_rel = self.absmax = self.top = 0.0
        self.shapes_differ = False
        self.inputs: Optional[list] = [0.0, 0.0, 0.0, 0]  # dot, rr, cc, nonfinite

    def add(self, ref: np.ndarray, cand: np.ndarray, ref_in, cand_in,
            sums: Optional[dict] = None) -> None:
        """Add one chunk's outputs and first inputs. ``sums`` (shared by the cells of one
        run) holds the input sums of recent outputs, by array: a cell's input is mostly the
        output of the cell before it, already summed."""
        if ref.shape != cand.shape:
            self.shapes_differ = True
        else:
            self._add_outputs(ref, cand, sums)
        if ref_in is None or cand_in is None or ref_in.shape != cand_in.shape:
            self.inputs = None
        elif self.inputs is not None:
            held = None if sums is None else sums.get((id(ref_in), id(cand_in)))
            if held is not None and held[0] is ref_in and held[1] is cand_in:
                dot, rr, cc, bad = held[2]
            else:
                dot, rr, cc, bad = _input_sums(ref_in, cand_in)
            self.inputs = [self.inputs[0] + dot, self.inputs[1] + rr,
                           self.inputs[2] + cc, self.inputs[3] + bad]

    def _add_outputs(self, ref: np.ndarray, cand: np.ndarray, sums: Optional[dict]) -> None:
        absr = np.abs(ref)  # the range pass's measures (``magnitudes``), on this input
        peak = float(absr.max()) if absr.size else 0.0
        nonzero = int(np.count_nonzero(absr))
        self.top = float("inf") if not np.isfinite(peak) or self.top == float("inf") \
            else max(self.top, peak)
        self.tiny += nonzero - int(np.count_nonzero(absr >= FP16_TINY)) if nonzero else 0
        self.nonzero += nonzero
        r, c = ref.astype(np.float64), cand.astype(np.float64)
        finite = np.isfinite(c)
        bad = int(c.size - np.count_nonzero(finite))
        if bad:
            c = np.where(finite, c, 0.0)
        diff = np.subtract(c, r)
        np.abs(diff, out=diff)
        if bad:
            diff[~finite] = np.inf
        self.size += r.size
        self.nonfinite += bad
        dot = rr = cc = 0.0
        if r.size:
            self.absmax = _top(self.absmax, peak)
            self.max_abs = _top(self.max_abs, float(diff.max()))
            scaled = np.abs(r)  # |ref| + 1e-6, then diff over it, in place
            scaled += 1e-6
            np.divide(diff, scaled, out=scaled)
            self.max_rel = _top(self.max_rel, float(scaled.max()))
            dot, rr, cc = float(r @ c), float(r @ r), float(c @ c)
            self.dot += dot
            self.rr += rr
            self.cc += cc
            self.dd += float(diff @ diff)
        if sums is not None:
            sums[(id(ref), id(cand))] = (ref, cand, (dot, rr, cc, bad))
            if len(sums) > 8:
                del sums[next(iter(sums))]

    def metrics(self) -> dict:
        """cosine, rel_l2, max_rel, max_abs, nonfinite, ref_absmax, subnormal, in_cosine."""
        if not self.size:
            out = {"cosine": 1.0, "rel_l2": 0.0, "max_rel": 0.0, "max_abs": 0.0}
        else:
            rn = np.sqrt(self.rr)
            out = {"cosine": _cosine_of(self.dot, self.rr, self.cc, self.nonfinite),
                   "rel_l2": float(np.sqrt(self.dd) / rn) if rn > 0 else float(np.sqrt(self.dd)),
                   "max_rel": self.max_rel, "max_abs": self.max_abs}
        in_cos = None if self.inputs is None else _cosine_of(*self.inputs)
        return {**out, "nonfinite": self.nonfinite, "ref_absmax": self.absmax,
                "subnormal": self.tiny / self.nonzero if self.nonzero else 0.0,
                "in_cosine": in_cos}


def _input_sums(ref_in: np.ndarray, cand_in: np.ndarray) -> tuple:
    """(ref . cand, ref . ref, cand . cand, non-finite candidate values) in float64, the
    candidate's non-finite values counted as 0 in the products."""
    r, c = ref_in.astype(np.float64), cand_in.astype(np.float64)
    bad = int(c.size - np.count_nonzero(np.isfinite(c)))
    c = np.where(np.isfinite(c), c, 0.0) if bad else c
    return float(r @ c), float(r @ r), float(c @ c), bad


def _top(a: float, b: float) -> float:
    """The larger of two maxima, NaN when either is (as numpy's max of their values)."""
    return float("nan") if a != a or b != b else max(a, b)


def _cosine_of(dot: float, rr: float, cc: float, nonfinite: int) -> float:
    """``metrics._cosine`` from its sums."""
    if nonfinite:
        return float("nan")
    rn, cn = float(np.sqrt(rr)), float(np.sqrt(cc))
    if rn == 0.0 and cn == 0.0:
        return 1.0
    if rn == 0.0 or cn == 0.0:
        return 0.0
    return float(dot / (rn * cn))


def load_weights(net, weights: dict, source: str) -> None:
    """Set every parameter of ``net`` from ``weights`` (name -> array; floating-point
    values through float32 into the parameter's dtype). A parameter that is not
    floating-point (an integer buffer such as a detector head's strides) keeps the value the
    model builds it with when ``weights`` lacks it: artefacts store floating-point weights
    only, and precision never changes the others."""
    import mindspore as ms
    from mindspore.common import dtype as mstype

    missing = [p.name for p in net.get_parameters()
               if p.name not in weights and p.dtype in mstype.float_type]
    if missing:
        raise UsageError(f"{source} lacks weights {', '.join(missing[:3])} of the model",
                         "pass the --model these weights belong to")
    for p in net.get_parameters():
        if p.name not in weights:
            if p.has_init:  # built without weights (uninitialized): its initial value
                p.init_data()
            continue
        value = np.asarray(weights[p.name])
        if tuple(value.shape) != tuple(p.shape):
            raise UsageError(f"{source}: weight {p.name} has shape {value.shape}, the model "
                             f"{tuple(p.shape)}", "pass the --model these weights belong to")
        same = {mstype.float32: np.float32, mstype.float16: np.float16}.get(p.dtype)
        if np.issubdtype(value.dtype, np.floating) and value.dtype != same:
            value = value.astype(np.float32, copy=False)
        if value.dtype == same and value.flags.c_contiguous:
            tensor = ms.Tensor.from_numpy(value)  # the weights' own array: no second copy
        else:
            tensor = ms.Tensor(value, dtype=p.dtype)
        p.set_data(tensor)
        p.init_param = True


def _first_tensor(value):
    import mindspore as ms

    if isinstance(value, ms.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for v in value:
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def _flat(output) -> Optional[np.ndarray]:
    import mindspore as ms

    items = output if isinstance(output, (tuple, list)) else [output]
    arrays = [t.asnumpy().ravel() for t in items if isinstance(t, ms.Tensor)]
    if not arrays:
        return None
    return (arrays[0] if len(arrays) == 1 else np.concatenate(arrays)).astype(np.float32,
                                                                            copy=False)


class LayerProbe:
    """Eager networks for one model, one per precision policy, reused across candidates."""

    def __init__(self, model: str):
        self.model = model
        recorded = isinstance(model, dict) and bool(model.get("recorded_in"))
        # a model read from a manifest was checked where it was recorded (its network, built
        # here without weights, is the first one handed out); one the user names (--model)
        # is checked here
        self.spec = build_uninitialized(lambda: resolve_model(model, probe=False)) \
            if recorded else resolve_model(model)
        self._nets: dict = {}

    def _capture(self, role: str, policy) -> _Capture:
        key = (role, json.dumps(policy.to_dict(), sort_keys=True) if policy else "fp32")
        if key not in self._nets:
            self._nets[key] = _Capture(self._fresh(), policy)
        return self._nets[key]

    def _fresh(self):
        """A network of the model built without weights (``load_weights`` gives it every
        one), as a factory that computes on its fresh weights is built as usual."""
        return build_uninitialized(self.spec.build)

    def param_names(self) -> list:
        return [p.name for p in self._capture("reference", None).net.get_parameters()]

    def localize(self, ref_weights: tuple, cand_weights: tuple, policy, ref_x: np.ndarray,
                 cand_x: np.ndarray, min_cosine: float) -> dict:
        """Rows per cell in execution order, the first cell below ``min_cosine`` and its origin.

        ``*_weights`` are (name -> array, description); ``policy`` is the candidate's.
        """
        ref_net = self._capture("reference", None)
        ref_net.load_weights(*ref_weights)
        cand_net = self._capture("candidate", policy)
        cand_net.load_weights(*cand_weights)
        for net in (ref_net, cand_net):
            net.order, net.dtypes = [], {}
        pairs: dict = {}
        for start in range(0, len(cand_x), CHUNK):
            ref = ref_net.keep(ref_x[start:start + CHUNK])
            cand_net.compare(cand_x[start:start + CHUNK], ref, pairs)
        inputs = _Pair()
        inputs.add(ref_x.ravel(), cand_x.ravel(), None, None)
        rows = [_row(INPUT_ROW, "input", str(cand_x.dtype), inputs, min_cosine)]
        for key in ref_net.order:
            if key not in pairs:
                continue
            path = key.split("#")[0]
            type_name = "network" if path == OUTPUT_ROW else ref_net.types.get(path, "?")
            rows.append(_row(key, type_name, cand_net.dtypes.get(key, "?"), pairs[key],
                             min_cosine))
        first = next((r for r in rows if r["flagged"]), None)
        return {"model": self.model, "policy": policy.describe() if policy else "fp32",
                "samples": int(len(cand_x)), "min_cosine": min_cosine, "rows": rows,
                "first_flagged": first["path"] if first else None,
                "origin": first["origin"] if first else None}


def _row(path, type_name, dtype, pair: _Pair, min_cosine) -> dict:
    if pair.shapes_differ:
        return {"path": path, "type": type_name, "dtype": dtype, "cosine": None,
                "rel_l2": None, "max_rel": None, "max_abs": None, "nonfinite": 0,
                "ref_absmax": None, "subnormal": None, "fp16_risk": None,
                "in_cosine": None,
                "flagged": False, "origin": None}
    m = pair.metrics()
    cos, in_cos = m["cosine"], m["in_cosine"]
    flagged = not (cos == cos and cos >= min_cosine)
    origin = None
    if flagged:
        origin = "born" if in_cos is None or (in_cos == in_cos and in_cos >= min_cosine) \
            else "inherited"
        if path == INPUT_ROW:
            origin = "input"
    return {"path": path, "type": type_name, "dtype": dtype, "cosine": cos,
            "rel_l2": m["rel_l2"], "max_rel": m["max_rel"], "max_abs": m["max_abs"],
            "nonfinite": m["nonfinite"], "ref_absmax": m["ref_absmax"],
            "subnormal": m["subnormal"], "fp16_risk": fp16_risk(pair.top, m["subnormal"]),
            "in_cosine": in_cos, "flagged": flagged, "origin": origin}
