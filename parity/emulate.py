"""What an fp16 candidate computes when the runtime ignores its deployment settings.

An fp16 graph that keeps cells in fp32 relies on the runtime keeping them there (its
``deployment`` settings: MindSpore Lite ``enforce_origin``, ATC ``must_keep_origin_dtype``);
Ascend's default modes compute them in fp16 instead. The emulation builds the candidate's
network with its weights and **no** kept cells (every cell in float16, parameters stored in
float16, as an O3 graph), runs it eagerly (PyNative) on the candidate's inputs and judges its
outputs against the reference with the candidate's own limits. The result is informational:
it never changes the candidate's verdict. A breach means the model depends on its kept
cells: deployed without the settings it would fail this gate.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Callable, List, Optional

import numpy as np

from amptool.documents.manifest import KeptCell
from amptool.documents.parity import Deployment, Emulation, OutputResult
from amptool.errors import AmpToolError, first_line
from amptool.network.ckptstream import build_uninitialized
from amptool.network.models import flat_outputs, resolve_model
from amptool.parity.inputs import batched_outputs
from amptool.parity.layers import load_weights
from amptool.parity.localize import policy_of, weights_of
from amptool.parity.report import fmt
from amptool.parity.stream import spool_outputs
from amptool.precision.apply import apply_policy, low_precision_params, resolve_fp32_cells
from amptool.precision.policy import make_policy

CHUNK = 64
"""Samples per eager call."""


class EmulatedRunner:
    """The candidate's network with every cell in float16, with the runners' interface."""

    def __init__(self, spec, weights: dict, source: str):
        import mindspore as ms

        net = build_uninitialized(spec.build)  # every weight is set next, straight into float16
        every = make_policy("O3")  # nothing kept: what a runtime casting fp32 to fp16 runs
        for param in low_precision_params(net, every):
            param.set_dtype(ms.float16)
        load_weights(net, weights, source)
        net.set_train(False)
        self.net = apply_policy(net, every)
        self.net.set_train(False)
        self.inputs = [i.to_dict() for i in spec.inputs]
        self._ms = ms

    def run(self, inputs: list) -> list:
        ms = self._ms
        outs = []
        for start in range(0, len(inputs[0]), CHUNK):
            fed = [ms.Tensor(np.asarray(x[start:start + CHUNK], dtype=np.dtype(spec["dtype"])))
                   for x, spec in zip(inputs, self.inputs)]
            out = self.net(*fed)
            outs.append([o.asnumpy().astype(np.float32) for o in flat_outputs(out)])
        return [np.concatenate([part[i] for part in outs]) for i in range(len(outs[0]))]


def kept_of(cand, model) -> tuple:
    """(policy, [{path, type}] of the cells ``cand``'s graph keeps in fp32, spec)."""
    policy = policy_of(cand)
    # the structure alone is read: built without weights and not run (the emulation runs it)
    spec = build_uninitialized(lambda: resolve_model(model, probe=False))
    net = build_uninitialized(spec.build)  # the network resolve_model built
    kept = resolve_fp32_cells(net, policy)
    return policy, [{"path": p, "type": type(c).__name__} for p, c in kept.items()], spec


def settings_ignored(cfg, ref, cand, inputs, ref_out: list, cache: dict,
                     judge: Callable[[int, np.ndarray, np.ndarray], OutputResult],
                     spool: Optional[str] = None) -> Optional[Deployment]:
    """The ``deployment`` entry of an fp16 candidate's result (None for other candidates):
    the cells it keeps in fp32, its settings (the manifest's section) and, when it keeps
    any, how the emulation without them fares against ``ref_out`` (``judge(index, ref,
    out)`` judges one output as the candidate's are judged; ``spool``: a folder where the
    emulation's outputs are written batch by batch, else they are kept in memory). Never
    raises for a network it cannot emulate: the entry says why instead."""
    if cand.precision != "fp16" or cand.kind != "artefact":
        return None
    section = cand.manifest.deployment if cand.manifest else None
    entry = Deployment(settings=section, kept_fp32=None, emulated=None, depends=None,
                       message=None)
    model = cfg.user_model() or cand.model_ref or ref.model_ref
    if not model:
        return replace(entry, message="not emulated: no manifest names the model (pass --model)")
    try:
        _, kept, spec = kept_of(cand, model)
        entry = replace(entry, kept_fp32=[KeptCell(c["path"], c["type"]) for c in kept])
        if not kept:
            return replace(entry, depends=False, message="no cell is kept in fp32: the graph "
                                                         "needs no deployment settings")
        weights, source = weights_of(cand, [cfg.ckpt], cache.setdefault("__checkpoints__", {}))
        key = ("emulated", repr(model), _digest(weights))
        if key not in cache:
            cache[key] = _emulated_outputs(EmulatedRunner(spec, weights, source), inputs,
                                           cand.preprocess, spool, cfg.batch_size)
        outs = cache[key]
    except (AmpToolError, RuntimeError, TypeError, ValueError) as exc:
        return replace(entry, message=f"not emulated: {first_line(exc)}")
    outputs = [judge(i, r, c) for i, (r, c) in enumerate(zip(ref_out, outs))]
    depends = not all(o.passed for o in outputs)
    return replace(entry, emulated=Emulation(source, outputs), depends=depends,
                   message=describe(entry.kept_fp32 or [], outputs, depends))


def _emulated_outputs(runner, inputs, preprocess, spool: Optional[str], size: int) -> list:
    """The emulation's outputs: spooled to a folder of ``spool`` batch by batch
    (``StoredArray`` each), or in memory without one."""
    if spool is None:
        return batched_outputs(runner, inputs.for_preprocess(preprocess))
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="emulated-", dir=spool))
    return spool_outputs(runner, inputs, preprocess, size, folder)


def _digest(weights: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        value = np.ascontiguousarray(weights[name])
        h.update(json.dumps([name, str(value.dtype), list(value.shape)]).encode())
        h.update(value.tobytes())
    return h.hexdigest()


def describe(kept: List[KeptCell], outputs: List[OutputResult], depends: bool) -> str:
    """'ignoring the deployment settings (norm in fp16): top-1 agreement 0.62, ... — the
    kept cells matter'."""
    cells = ", ".join(c.path or "(network)" for c in kept[:4]) + (
        f" and {len(kept) - 4} more" if len(kept) > 4 else "")
    every = [o.metrics for o in outputs]  # the worst figure of any output
    top = next((m for m in every if m.top1_agree is not None), None)
    cosines = [m.cosine for m in every if m.cosine is not None]
    figures = [f"top-1 agreement {fmt(top.top1_agree)}"] if top else []
    if cosines:
        figures.append(f"cosine {fmt(next((c for c in cosines if c != c), min(cosines)))}")
    rels = [m.max_rel for m in every if m.max_rel is not None]
    figures.append(f"max rel error {fmt(max(rels) if rels else None)}")
    nonfinite = sum(m.nonfinite or 0 for m in every)
    if nonfinite:
        figures.append(f"{nonfinite} NaN/Inf")
    breaches = [f"{r.metric} {fmt(r.value)}, limit {r.limit}"
                for o in outputs for r in o.checks if r.passed is False]
    verdict = (f"the kept cells matter: without the settings this gate fails ({breaches[0]})"
               if depends else "no dependency: the gate passes with them in fp16 too")
    return (f"ignoring the deployment settings ({cells} in fp16): {', '.join(figures)} "
            f"— {verdict}")
