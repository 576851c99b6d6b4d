"""Per-layer localization: which cell's output first drifts from fp32, and is it born there.

The network runs eagerly (PyNative; forward hooks do nothing in GRAPH_MODE) twice on the
same samples: in fp32 with the reference's weights, and under the candidate's precision
policy with the candidate's weights. Hooks sit on the original cell objects, found by path
before ``apply_policy`` wraps the cells it keeps in fp32, so paths stay those of the model.
One network is built per precision and reused for every candidate.
"""
from __future__ import annotations

import json
from typing import Optional

import numpy as np

from amptool.errors import UsageError
from amptool.metrics import compute_metrics
from amptool.ranges import fp16_risk, magnitudes

INPUT_ROW = "(input)"
OUTPUT_ROW = "(output)"


class _Capture:
    """A network with forward hooks recording each cell's first input and output."""

    def __init__(self, spec, policy):
        from amptool.precision import apply_policy, cell_paths

        self.net = spec.build()
        self.paths = cell_paths(self.net)
        self.types = {p: type(c).__name__ for p, c in self.paths.items()}
        self.records: dict = {}
        self.order: list = []
        self.calls: dict = {}
        self.dtypes: dict = {}
        for path, cell in self.paths.items():
            cell.register_forward_hook(self._hook(path or OUTPUT_ROW))
        self.runnable = apply_policy(self.net, policy) if policy is not None else self.net
        self.runnable.set_train(False)

    def _hook(self, path):
        def hook(cell, inputs, output):
            n = self.calls.get(path, 0)
            self.calls[path] = n + 1
            key = path if n == 0 else f"{path}#{n + 1}"
            first_in = _first_tensor(inputs)
            out = _flat(output)
            if out is None:
                return
            if key not in self.records:
                self.records[key] = ([], [])
                self.order.append(key)
                self.dtypes[key] = str(_first_tensor(output).dtype).lower()
            ins, outs = self.records[key]
            ins.append(None if first_in is None else first_in.asnumpy().ravel())
            outs.append(out)
        return hook

    def load_weights(self, weights: dict, source: str) -> None:
        load_weights(self.net, weights, source)

    def run(self, x: np.ndarray, chunk: int = 16) -> dict:
        """path -> (inputs, outputs) flattened over all samples; order in self.order."""
        import mindspore as ms

        self.records, self.order, self.dtypes = {}, [], {}
        for start in range(0, len(x), chunk):
            self.calls = {}
            self.runnable(ms.Tensor(x[start:start + chunk]))
        return {k: (_join(ins), np.concatenate(outs)) for k, (ins, outs) in self.records.items()}


def load_weights(net, weights: dict, source: str) -> None:
    """Set every parameter of ``net`` from ``weights`` (name -> array; floating-point
    values through float32 into the parameter's dtype)."""
    import mindspore as ms

    missing = [p.name for p in net.get_parameters() if p.name not in weights]
    if missing:
        raise UsageError(f"{source} lacks weights {', '.join(missing[:3])} of the model",
                         "pass the --model these weights belong to")
    for p in net.get_parameters():
        value = np.asarray(weights[p.name])
        if tuple(value.shape) != tuple(p.shape):
            raise UsageError(f"{source}: weight {p.name} has shape {value.shape}, the model "
                             f"{tuple(p.shape)}", "pass the --model these weights belong to")
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype(np.float32)
        p.set_data(ms.Tensor(value, dtype=p.dtype))


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
    return np.concatenate(arrays).astype(np.float32) if arrays else None


def _join(parts: list) -> Optional[np.ndarray]:
    return None if any(p is None for p in parts) else np.concatenate(parts)


def _cosine(a: Optional[np.ndarray], b: Optional[np.ndarray]) -> Optional[float]:
    if a is None or b is None or a.shape != b.shape:
        return None
    return compute_metrics(a, b)["cosine"]


class LayerProbe:
    """Eager networks for one model, one per precision policy, reused across candidates."""

    def __init__(self, model: str):
        from amptool.models import resolve_model

        self.model = model
        self.spec = resolve_model(model)
        self._nets: dict = {}

    def _capture(self, role: str, policy) -> _Capture:
        key = (role, json.dumps(policy.to_dict(), sort_keys=True) if policy else "fp32")
        if key not in self._nets:
            self._nets[key] = _Capture(self.spec, policy)
        return self._nets[key]

    def param_names(self) -> list:
        return [p.name for p in self._capture("reference", None).net.get_parameters()]

    def localize(self, ref_weights: tuple, cand_weights: tuple, policy, ref_x: np.ndarray,
                 cand_x: np.ndarray, min_cosine: float) -> dict:
        """Rows per cell in execution order, the first cell below ``min_cosine`` and its origin.

        ``*_weights`` are (name -> array, description); ``policy`` is the candidate's.
        """
        ref_net = self._capture("reference", None)
        ref_net.load_weights(*ref_weights)
        ref = ref_net.run(ref_x)
        cand_net = self._capture("candidate", policy)
        cand_net.load_weights(*cand_weights)
        cand = cand_net.run(cand_x)
        rows = [_row(INPUT_ROW, "input", str(cand_x.dtype), ref_x.ravel(), cand_x.ravel(),
                     None, None, min_cosine)]
        for key in ref_net.order:
            if key not in cand:
                continue
            (r_in, r_out), (c_in, c_out) = ref[key], cand[key]
            path = key.split("#")[0]
            type_name = "network" if path == OUTPUT_ROW else ref_net.types.get(path, "?")
            rows.append(_row(key, type_name, cand_net.dtypes.get(key, "?"),
                             r_out, c_out, r_in, c_in, min_cosine))
        first = next((r for r in rows if r["flagged"]), None)
        return {"model": self.model, "policy": policy.describe() if policy else "fp32",
                "samples": int(len(cand_x)), "min_cosine": min_cosine, "rows": rows,
                "first_flagged": first["path"] if first else None,
                "origin": first["origin"] if first else None}


def _row(path, type_name, dtype, ref_out, cand_out, ref_in, cand_in, min_cosine) -> dict:
    if ref_out.shape != cand_out.shape:
        return {"path": path, "type": type_name, "dtype": dtype, "cosine": None,
                "rel_l2": None, "max_rel": None, "max_abs": None, "nonfinite": 0,
                "ref_absmax": None, "subnormal": None, "fp16_risk": None,
                "in_cosine": None,
                "flagged": False, "origin": None}
    m = compute_metrics(ref_out, cand_out)
    top, tiny, nonzero = magnitudes(ref_out)  # the range pass's measure, on this input
    subnormal = tiny / nonzero if nonzero else 0.0
    in_cos = _cosine(ref_in, cand_in)
    cos = m["cosine"]
    flagged = not (cos == cos and cos >= min_cosine)
    origin = None
    if flagged:
        origin = "born" if in_cos is None or (in_cos == in_cos and in_cos >= min_cosine) \
            else "inherited"
        if path == INPUT_ROW:
            origin = "input"
    return {"path": path, "type": type_name, "dtype": dtype, "cosine": cos,
            "rel_l2": m["rel_l2"], "max_rel": m["max_rel"], "max_abs": m["max_abs"],
            "nonfinite": m["nonfinite"],
            "ref_absmax": float(np.abs(ref_out).max()) if ref_out.size else 0.0,
            "subnormal": subnormal, "fp16_risk": fp16_risk(top, subnormal),
            "in_cosine": in_cos, "flagged": flagged, "origin": origin}
