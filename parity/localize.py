"""Per-layer localization of one candidate: its weights and its cells against fp32.

Weights come from the artefacts themselves where they can be read (so a corrupted stored
weight is seen), else from the manifest's checkpoint or ``--ckpt``. With ``--per-layer``
every candidate is localized; otherwise a failing one is (``localize_failure``), on the
samples of its first batches that breach a limit on their own.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from amptool.documents.door import from_json
from amptool.documents.layers import LayerReport, WeightsCheck
from amptool.documents.parity import CandidateResult, Finding
from amptool.errors import AmpToolError, UsageError, debugging
from amptool.network.ckptstream import checkpoint_arrays
from amptool.network.trust import vet_recorded
from amptool.parity.config import ParityConfig
from amptool.parity.inputs import InputSet
from amptool.parity.accumulate import CandidateStats
from amptool.parity.layers import LayerProbe
from amptool.parity.sides import Side, side_weights
from amptool.parity.stream import spans, stream_candidate
from amptool.parity.weights import compare_weights
from amptool.precision.policy import make_policy, policy_for, policy_from_dict


def _checkpoint_weights(path: str, cache: dict) -> dict:
    if path not in cache:
        cache[path] = checkpoint_arrays(path)
    return cache[path]


def weights_of(src: Side, fallback: list, cache: dict) -> tuple:
    """(name -> array, description) of the weights a side computes with."""
    stored = side_weights(src) if src.kind != "golden" else None
    if stored is not None:
        return stored, (f"{src.path} "
                        f"({'checkpoint' if src.kind == 'checkpoint' else 'stored weights'})")
    for ckpt in [src.checkpoint] + fallback:
        if ckpt and Path(ckpt).is_file():
            return _checkpoint_weights(ckpt, cache), f"checkpoint {ckpt}"
    raise UsageError(f"per-layer: the weights of {src.path} cannot be read and no checkpoint "
                     "is known", "pass --ckpt FILE (the checkpoint it was exported from)")


def policy_of(cand: Side):
    if cand.precision == "fp32":
        return make_policy("O0")
    if cand.policy:
        return policy_from_dict(cand.policy, source=f"policy in the manifest of {cand.path}")
    return policy_for()


def layer_model(cfg: ParityConfig, ref: Side, cand: Side):
    """The model per-layer builds for ``cand``: --model, else the one its manifest (or the
    reference's) records."""
    model = cfg.user_model() or cand.model_ref or ref.model_ref
    if not model:
        raise UsageError(f"per-layer: no manifest names the model of {cand.path}",
                         "pass --model NAME or path/to/file.py:factory")
    return model


def vet_layer_models(cfg: ParityConfig, ref: Side, cands: list) -> None:
    """Refuse before any comparison runs what per-layer would refuse after it: a model a
    manifest names that is not this user's to run (see trust.vet_recorded)."""
    for cand in cands:
        model = layer_model(cfg, ref, cand)
        if isinstance(model, dict) and model.get("recorded_in"):
            vet_recorded(model)


def localize_candidate(cfg: ParityConfig, ref: Side, cand: Side, inputs: InputSet,
                       th, probes: dict, result: CandidateResult,
                       rows=None) -> CandidateResult:
    """``result`` with its ``per_layer`` and ``weights`` sections, on the samples ``rows``
    (those of the first batches that breach a limit on their own), else on the first
    ``cfg.layer_samples``."""
    model = layer_model(cfg, ref, cand)  # recorded ones are vetted
    cache = probes.setdefault("__checkpoints__", {})
    fallback = [cfg.ckpt, cand.checkpoint]
    ref_w = weights_of(ref, fallback, cache)
    cand_w = weights_of(cand, [cfg.ckpt], cache)
    key = repr(model)
    if key not in probes:
        probes[key] = LayerProbe(model)
    probe = probes[key]
    mismatched = compare_weights(ref_w[0], cand_w[0], probe.param_names())
    for item in mismatched:
        item["cell"] = item["name"].rpartition(".")[0] or item["name"]
    weights = from_json(WeightsCheck, {"reference": ref_w[1], "candidate": cand_w[1],
                                       "mismatched": mismatched}, "weights")
    sub = inputs.head(cfg.layer_samples) if rows is None else inputs.select(rows)
    ref_x = sub.for_preprocess(ref.preprocess)[0]
    cand_x = sub.for_preprocess(cand.preprocess)[0]
    min_cos = cfg.layer_min_cosine if cfg.layer_min_cosine is not None else (th.min_cosine or 0.99)
    layers = probe.localize(ref_w, cand_w, policy_of(cand), ref_x, cand_x, min_cos)
    return replace(result, weights=weights,
                   per_layer=from_json(LayerReport, layers, "per-layer"))


def failing_rows(cand: Side, inputs: InputSet, ref_out: list, stats: CandidateStats,
                 size: int, count: int):
    """The first ``count`` samples of the batches on which ``cand`` breaches a limit on its
    own (None when none does): the candidate run again, batch by batch, until they are
    found; ``stats``: its fresh statistics (``keep_failing``)."""
    with cand.opened() as runner:
        for span in spans((0, inputs.count), size):
            stream_candidate(runner, inputs, cand.preprocess, size, ref_out, stats, span)
            rows = stats.first_failing(count)
            if rows is not None and len(rows) >= count:
                break
    return stats.first_failing(count)


def localize_failure(cfg: ParityConfig, ref: Side, cand: Side, inputs: InputSet, th,
                     probes: dict, result: CandidateResult,
                     rows: Callable[[], object]) -> CandidateResult:
    """``localize_candidate`` for a candidate that failed, on the samples ``rows()`` finds;
    what stops it (no manifest names the model, weights that cannot be read, code not
    trusted) becomes a ``not_localized`` finding saying why and how to localize."""
    try:
        return localize_candidate(cfg, ref, cand, inputs, th, probes, result, rows())
    except Exception as exc:  # a diagnosis of a failure already judged: say why, go on
        if debugging():
            raise
        if isinstance(exc, AmpToolError):
            why, fix = exc.problem.removeprefix("per-layer: "), exc.fix
        else:
            why = f"the per-layer pass failed ({type(exc).__name__}: " \
                  f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})"
            fix = "run again with --per-layer to see the error"
        note = Finding("not_localized", "per-layer", f"not localized: {why}", fix)
        return replace(result, per_layer=None, weights=None,
                       findings=[*result.findings, note])
