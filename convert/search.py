"""Search for a small set of cells to keep in fp32 so the fp16 network passes parity.

One eager (PyNative) network holds the checkpoint's weights; the fp32 reference output
is computed once on one batch of held-out inputs. Each trial sets ``to_float`` flags on
that network as ``apply_policy`` does for the trial's cells (a kept cell hands its fp32
output on as it is; a cell whose sub-cells are all kept is kept too) and compares its
output with the reference using parity's metrics and thresholds. Eager operators of a
low-precision cell cast their inputs to the low dtype, where graph mode follows type
promotion: so the found policy is confirmed compiled in graph mode, as train and export
run it.

With every candidate in fp32 the network must compute what the fp32 reference does
(max |diff| <= 1e-6 x max(1, max |ref|)); otherwise the search stops with CheckFailed.
The search works on blocks, then inside them (``bisection.bisect_cells``). A trial is
known by the cells it actually keeps (a cell whose sub-cells are all kept is kept too), so
two ways of asking for the same network run once. A result that keeps every candidate is
no fp16 policy and fails too.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Union, cast

from amptool.documents.door import from_json
from amptool.errors import CheckFailed, UsageError
from amptool.network.checkpoint import build_with_weights
from amptool.precision.apply import (cell_origins, cell_paths, close_kept, low_precision_params,
                                     ms_dtype, output_fp32, resolve_fp32_cells, set_precision,
                                     within)
from amptool.precision.policy import (check_dtype_on_device, make_policy, policy_for, policy_format,
                                      save_policy)
from amptool.precision.ranges import measure_ranges, outside_policy, range_candidates
from amptool.precision.safety import why_kept
from amptool.runtime.device import execution_mode, resolve_device, set_device
from amptool.stats.limits import Thresholds

from .bisection import bisect_cells, in_order, sub_units
from .config import SearchConfig, validate
from .judge import (
    OutputLimits,
    TaskCheck,
    as_outputs,
    check_all_fp32,
    confirm_policy,
    judge,
    search_thresholds,
)
from .plot import write_range_plot
from .result import (
    Confirmation,
    SearchEvent,
    SearchLimits,
    SearchResult,
    SearchStart,
    Trial,
    TrialMetrics,
    TrialRun,
)
from .subject import load_subject
from .trace import leaf_paths, record_execution

__all__ = ["Confirmation", "SearchConfig", "SearchResult", "Trial", "Trials", "search_policy",
           "validate"]
Callback = Optional[Callable[[SearchEvent], None]]


class Trials:
    """Runs and memoizes trials on one eager network whose cells' dtypes are switched."""

    def __init__(self, net, policy, x, ref, labels, thresholds: Union[Thresholds, OutputLimits],
                 emit,
                 logits: bool = True, task=None):
        self.net = net
        self.base_kept = resolve_fp32_cells(net, policy)
        self.forced16 = set(policy.fp16_cells)
        self._paths = cell_paths(net)
        self._dtype = ms_dtype(policy)
        self.amp_net = output_fp32(net)  # each trial flags ``net`` (``evaluate``)
        self.dtype_name = policy.dtype
        self.candidates: list = []
        self.x, self.ref, self.labels, self.th, self.emit = x, ref, labels, thresholds, emit
        self.logits = logits
        self.task = task  # a TaskCheck, or None
        self.log: list = []
        self.cache: dict = {}

    def add_candidates(self, order: list) -> None:
        self.candidates.extend(order)

    def closed(self, cells) -> dict:
        """What ``apply_policy`` keeps for the base plus ``cells`` (path -> cell)."""
        kept = {**self.base_kept, **{p: self._paths[p] for p in cells}}
        return close_kept(self.net, kept, self.forced16)

    def evaluate(self, kept, phase: str) -> bool:
        closed = self.closed(kept)
        key = frozenset(closed)
        if key in self.cache:
            return self.cache[key]
        set_precision(self.net, closed, self._dtype)
        out = as_outputs(self.amp_net(self.x))
        ok, metrics = judge(self.ref, out, self.labels, self.th, self.logits, self.task)
        self.cache[key] = ok
        record = Trial(len(self.log) + 1, phase, in_order(self.candidates, kept),
                       TrialMetrics.from_dict(metrics), ok)
        self.log.append(record)
        self.emit(TrialRun(record))
        return ok


def base_policy(cfg: SearchConfig):
    policy = policy_for(cfg.policy, cfg.level)
    if policy.level not in ("O2", "O3"):
        raise UsageError(f"search needs an O2 or O3 base, got {policy.level}",
                         "pass --level O3 (all fp16) or --level O2")
    return policy


def _check_out(cfg: SearchConfig) -> None:
    policy_format(cfg.out)
    out = Path(cfg.out)
    if out.exists() and not cfg.force:
        raise UsageError(f"{out} already exists", "pass --force to overwrite it")
    if not out.parent.is_dir():
        raise UsageError(f"folder {out.parent} does not exist", "create it or choose another --out")


def search_policy(cfg: SearchConfig, on_event: Callback = None) -> SearchResult:
    """Find fp32 cells for the fp16 network to pass parity; write the policy to ``cfg.out``.

    Raises CheckFailed when no policy passes, not even every candidate cell in fp32.
    ``on_event`` is handed a ``SearchStart``, then a ``TrialRun`` after each trial.
    """
    emit = on_event or (lambda event: None)
    t0 = time.perf_counter()
    validate(cfg)
    base = base_policy(cfg)
    _check_out(cfg)
    src = load_subject(cfg.run, cfg.ckpt, cfg.model, cfg.data, cfg.samples, cfg.model_args,
                       cfg.input_spec)  # a run folder's mistakes before MindSpore loads
    device = resolve_device(cfg.device)
    check_dtype_on_device(base, device)
    with execution_mode(graph=False):
        set_device(device, graph=False)
        result = _search(cfg, src, base, device, emit)
    return replace(result, seconds=time.perf_counter() - t0)


def _search(cfg: SearchConfig, src, base, device: str, emit) -> SearchResult:
    import mindspore as ms

    net = build_with_weights(src.spec, src.weights, f"checkpoint {src.ckpt}")
    x = ms.Tensor(src.x)
    ref, calls = record_execution(net, x)
    given = base
    base_kept = list(resolve_fp32_cells(net, given))
    measured, ranged = _range_pass(net, src.x, cfg.range_safety, given, cfg.plot is not None)
    if ranged:  # kept in every trial, like the base's own cells
        base = _final_policy(given, [r["path"] for r in ranged])
    order = [c.path for c in calls if c.path not in base.fp16_cells
             and not any(within(c.path, k) for k in resolve_fp32_cells(net, base))]
    th = search_thresholds(cfg, src.classifier, src.spec.class_logits, src.spec.num_classes)
    task = TaskCheck.load(cfg.metric, ref, src.y) if cfg.metric else None
    trials = Trials(net, base, x, ref, src.y, th, emit, src.classifier, task)
    trials.add_candidates(order)
    limits = from_json(SearchLimits, th.to_dict(as_outputs(ref)), "search limits")
    emit(SearchStart(src.spec.name, order, given.describe(), base_kept, len(src.x), device,
                     src.ckpt, ranged, cfg.range_safety, src.classifier, limits))
    idle = [p for p in leaf_paths(net) if p not in {c.path for c in calls}]
    kept = [r["path"] for r in ranged] + _search_cells(trials, order, idle)
    policy = _final_policy(base, kept)
    confirmed = confirm_policy(src, policy, x, ref, th, task)
    confirm = Confirmation(confirmed["passed"], TrialMetrics.from_dict(confirmed["metrics"]),
                           confirmed["mode"])
    if not confirm.passed:
        raise CheckFailed(f"the found policy fails parity on a fresh network compiled in graph "
                          f"mode, as train and export run it (cosine "
                          f"{confirm.metrics.cosine:.6f})",
                          "keep the cells holding the kept ones in fp32 with a base --policy, "
                          "or loosen the thresholds")
    where = cell_origins(net, kept)
    ranged_at = {r["path"]: r for r in ranged}
    notes = {path: (f"{where.get(path, '?')}; range pass: "
                    # a cell is range-kept only by a pass that ran, with a safety factor
                    f"{why_kept(ranged_at[path], cast(float, cfg.range_safety))}"
                    if path in ranged_at
                    else f"{where.get(path, '?')}; needed to pass parity") for path in kept}
    if cfg.plot:
        write_range_plot(cfg.plot, measured, [r["path"] for r in ranged], cfg.range_safety)
    save_policy(policy, cfg.out, force=cfg.force, notes=notes)
    params16, flops16 = fp16_fractions(src, policy, calls)
    return SearchResult(policy, kept, base_kept, order, tuple(trials.log), params16, flops16,
                        confirm, 0.0, str(cfg.out), src.spec.name, len(src.x), ranged,
                        device=device, ckpt=src.ckpt, base=given.describe(), kept_where=where,
                        classifier=src.classifier,
                        thresholds=limits, metric=cfg.metric)


def _range_pass(net, x, safety: Optional[float], base, measure: bool = False) -> tuple:
    """(every cell's ranges, the range pass's cells outside what the base keeps already) on
    the search batch; with ``safety`` None, ranges only when ``measure`` asks for them."""
    if safety is None and not measure:
        return [], []
    ranges = measure_ranges(net, [[x]])
    if safety is None:
        return [r.to_dict() for r in ranges], []
    found = outside_policy(net, range_candidates(ranges, safety=safety), base)
    return [r.to_dict() for r in ranges], [r.to_dict() for r in found]


def _search_cells(trials: Trials, order: list, idle: list) -> list:
    """Cells to keep; ``idle`` are leaf cells the forward never called."""
    if trials.evaluate([], "all-fp16"):
        return []
    if not order:
        raise CheckFailed("no policy passes parity: the base fails and has no candidate cells "
                          "left to keep in fp32", "search from a base that keeps fewer cells")
    units = sub_units(order, "", trials.forced16)
    passes = trials.evaluate(units, "all-fp32")
    if not trials.forced16:  # cells the base forces to low precision stay low in every trial
        idle = [p for p in idle if not any(within(p, u) for u in units)]
        check_all_fp32(trials.log[-1].metrics.max_abs, trials.ref, len(order), idle)
    if not passes and trials.forced16:
        raise CheckFailed(f"no policy passes parity: with all {len(order)} candidate cells in "
                          "fp32 the network (its base forces cells to low precision) fails the "
                          "thresholds", "drop fp16_cells from the base policy or loosen the limits")
    if not passes:
        raise CheckFailed(f"no policy passes parity: with all {len(order)} candidate cells in "
                          "fp32 the network computes the fp32 reference and still fails the "
                          "thresholds", "the limits are stricter than fp32 itself: loosen them")
    kept = bisect_cells(order, trials.evaluate, trials.forced16)
    if all(any(within(leaf, k) for k in kept) for leaf in order):
        raise CheckFailed(f"no policy passes parity with a cell in {trials.dtype_name}: all "
                          f"{len(order)} candidate cells had to stay fp32",
                          "loosen the limits: only the fp32 network meets them")
    return kept


def _final_policy(base, kept: list):
    cells = list(base.fp32_cells) + [c for c in kept if c not in base.fp32_cells]
    return make_policy(base.level, base.dtype, base.fp32_types, cells, base.fp16_cells)


def fp16_fractions(src, policy, calls: list) -> tuple[float, float]:
    """Fractions of float parameters and of leaf-cell FLOPs left in the low dtype."""
    import mindspore as ms

    net = build_with_weights(src.spec, src.weights, src.ckpt)
    total = sum(int(p.size) for p in net.get_parameters() if p.dtype == ms.float32)
    low = sum(int(p.size) for p in low_precision_params(net, policy))
    kept = list(resolve_fp32_cells(net, policy))
    flops_all = sum(c.flops for c in calls)
    flops_low = sum(c.flops for c in calls if not any(within(c.path, k) for k in kept))
    return (low / total if total else 0.0), (flops_low / flops_all if flops_all else 0.0)
