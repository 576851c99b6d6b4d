"""Search for a small set of cells to keep in fp32 so the fp16 network passes parity.

One eager (PyNative) network holds the checkpoint's weights; the fp32 reference output
is computed once on one batch of held-out inputs. Each trial flips ``to_float`` flags
on that network (the cells under trial keep fp32 and cast their output back, exactly
as ``apply_policy`` does) and compares its output with the reference using parity's
metrics and thresholds.

The search bisects over contiguous segments of leaf cells in execution order: a
segment that passes in fp16 stays fp16, a failing segment is halved, a failing single
cell is kept fp32. Then each kept cell is tried in fp16 once more. The found policy is
confirmed once on a fresh network built by ``apply_policy``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from amptool.errors import CheckFailed, UsageError
from amptool.metrics import (
    FP16_VS_FP32,
    Thresholds,
    check_metrics,
    compute_metrics,
    passed,
)

Callback = Optional[Callable[[dict], None]]


@dataclass(frozen=True)
class SearchConfig:
    """What ``amptool convert search`` was asked to do."""

    run: Optional[str] = None
    """Training run folder (run.json + best checkpoint)."""
    ckpt: Optional[str] = None
    """Checkpoint to search on (instead of, or overriding, the run's)."""
    model: Optional[str] = None
    """Model of ``ckpt``: sample name or file.py:factory (default: the run's)."""
    data: Optional[str] = None
    """Data source of the inputs (default: the run's, else digits); its held-out split is used."""
    samples: Optional[int] = 256
    """Held-out samples in the batch every trial runs (None: the whole split)."""
    level: str = "O3"
    """Base level, O3 (all fp16) or O2 (BatchNorm/LayerNorm kept fp32)."""
    policy: Optional[str] = None
    """Base policy file (overrides ``level``); its fp32 cells and types stay fp32."""
    thresholds: Thresholds = FP16_VS_FP32
    """Parity limits every trial must meet."""
    out: str = "policy.toml"
    """Where the found policy is written (.toml, .yaml or .json)."""
    force: bool = False
    """Overwrite ``out`` if it exists."""
    device: str = "auto"
    """auto, CPU, GPU or Ascend."""


@dataclass
class SearchResult:
    """What a search found and what it cost."""

    policy: object
    kept: list
    base_kept: list
    candidates: list
    trials: list
    params_fp16: float
    flops_fp16: float
    confirm: dict
    seconds: float
    out: str
    model: str
    samples: int
    extra: dict = field(default_factory=dict)

    @property
    def n_trials(self) -> int:
        return len(self.trials)

    def to_dict(self) -> dict:
        return {"policy": self.policy.to_dict(), "kept": self.kept, "base_kept": self.base_kept,
                "candidates": self.candidates, "trials": self.trials, "n_trials": self.n_trials,
                "brute_force_trials": len(self.candidates), "params_fp16": self.params_fp16,
                "flops_fp16": self.flops_fp16, "confirm": self.confirm, "seconds": self.seconds,
                "out": self.out, "model": self.model, "samples": self.samples, **self.extra}


def _toggle_class():
    import mindspore as ms
    from mindspore import nn, ops

    class Toggle(nn.Cell):
        """Runs a leaf cell in the low dtype, or in fp32 with its output cast back."""

        def __init__(self, cell, dtype):
            super().__init__(auto_prefix=False)
            self.cell = cell
            self.dtype = dtype
            self.keep = False

        def set_keep(self, keep: bool) -> None:
            self.keep = keep
            self.cell.to_float(ms.float32 if keep else self.dtype)

        def construct(self, *args):
            if self.keep:
                return ops.cast(self.cell(*args), self.dtype)
            return self.cell(*args)

    return Toggle


class Trials:
    """Runs and memoizes trials on one eager network with switchable cells."""

    def __init__(self, net, policy, x, ref, labels, thresholds: Thresholds, emit):
        from amptool.precision import apply_policy, cell_paths, ms_dtype

        self.amp_net = apply_policy(net, policy)  # base-kept cells wrapped, the rest low dtype
        self._paths = cell_paths(net)
        self._dtype = ms_dtype(policy)
        self._Toggle = _toggle_class()
        self.toggles: dict = {}
        self.candidates: list = []
        self.x, self.ref, self.labels, self.th, self.emit = x, ref, labels, thresholds, emit
        self.log: list = []
        self.cache: dict = {}

    def add_candidates(self, order: list) -> None:
        from amptool.precision import replace_cell

        for path in order:
            toggle = self._Toggle(self._paths[path], self._dtype)
            replace_cell(self._paths, path, toggle)
            self.toggles[path] = toggle
            self.candidates.append(path)

    def evaluate(self, kept, phase: str) -> bool:
        key = frozenset(kept)
        if key in self.cache:
            return self.cache[key]
        for path, toggle in self.toggles.items():
            toggle.set_keep(path in key)
        out = self.amp_net(self.x).asnumpy()
        ok, metrics = judge(self.ref, out, self.labels, self.th)
        self.cache[key] = ok
        record = {"trial": len(self.log) + 1, "phase": phase,
                  "fp32": [p for p in self.candidates if p in key], "metrics": metrics,
                  "passed": ok}
        self.log.append(record)
        self.emit({"kind": "trial", **record})
        return ok


def judge(ref, out, labels, th: Thresholds) -> tuple[bool, dict]:
    metrics = compute_metrics(ref, out, labels, atol=th.atol, rtol=th.rtol)
    return passed(check_metrics(metrics, th)), metrics


def bisect(candidates: list, trial: Callable[[list, str], bool]) -> list:
    """Cells to keep in fp32, given that all-fp32 ``candidates`` passes and none-fp32 fails."""
    kept = list(candidates)

    def visit(segment: list) -> None:
        without = [c for c in kept if c not in segment]
        if trial(without, "bisect"):
            kept[:] = without
            return
        if len(segment) > 1:
            mid = len(segment) // 2
            visit(segment[:mid])
            visit(segment[mid:])

    visit(list(candidates))
    for cell in list(kept):
        without = [c for c in kept if c != cell]
        if trial(without, "drop"):
            kept[:] = without
    return kept


def base_policy(cfg: SearchConfig):
    from amptool.policy import policy_for

    policy = policy_for(cfg.policy, cfg.level)
    if policy.level not in ("O2", "O3"):
        raise UsageError(f"search needs an O2 or O3 base, got {policy.level}",
                         "pass --level O3 (all fp16) or --level O2")
    return policy


def _check_out(cfg: SearchConfig) -> None:
    from amptool.policy import policy_format

    policy_format(cfg.out)
    out = Path(cfg.out)
    if out.exists() and not cfg.force:
        raise UsageError(f"{out} already exists", "pass --force to overwrite it")
    if not out.parent.is_dir():
        raise UsageError(f"folder {out.parent} does not exist", "create it or choose another --out")


def search_policy(cfg: SearchConfig, on_event: Callback = None) -> SearchResult:
    """Find fp32 cells for the fp16 network to pass parity; write the policy to ``cfg.out``.

    Raises CheckFailed when no policy passes, not even every candidate cell in fp32.
    """
    emit = on_event or (lambda event: None)
    t0 = time.perf_counter()
    from amptool.device import import_mindspore, resolve_device, set_device
    from amptool.policy import check_dtype_on_device

    ms = import_mindspore()
    base = base_policy(cfg)
    _check_out(cfg)
    device = resolve_device(cfg.device)
    check_dtype_on_device(base, device)
    previous_mode = ms.get_context("mode")
    set_device(device, graph=False)
    try:
        result = _search(cfg, base, device, emit)
    finally:
        ms.set_context(mode=previous_mode)
    result.seconds = time.perf_counter() - t0
    return result


def _search(cfg: SearchConfig, base, device: str, emit) -> SearchResult:
    import mindspore as ms

    from amptool.checkpoint import build_with_weights
    from amptool.policy import save_policy
    from amptool.precision import resolve_fp32_cells

    from .source import load_source
    from .trace import record_execution

    src = load_source(cfg.run, cfg.ckpt, cfg.model, cfg.data, cfg.samples)
    net = build_with_weights(src.spec, src.weights, f"checkpoint {src.ckpt}")
    x = ms.Tensor(src.x)
    ref, calls = record_execution(net, x)
    base_kept = list(resolve_fp32_cells(net, base))
    inside = lambda p: any(p == k or p.startswith(k + ".") for k in base_kept)  # noqa: E731
    order = [c.path for c in calls if not inside(c.path)]
    trials = Trials(net, base, x, ref, src.y, cfg.thresholds, emit)
    trials.add_candidates(order)
    emit({"kind": "start", "model": src.spec.name, "candidates": order, "base": base.describe(),
          "base_kept": base_kept, "samples": len(src.x), "device": device, "ckpt": src.ckpt})
    kept = _run_search(trials, order)
    policy = _final_policy(base, kept)
    confirm = confirm_policy(src, policy, x, ref, cfg.thresholds)
    if not confirm["passed"]:
        raise CheckFailed(f"the found policy fails parity on a fresh network "
                          f"(cosine {confirm['metrics']['cosine']:.6f})",
                          "loosen the thresholds or keep more cells in fp32 by hand")
    save_policy(policy, cfg.out, force=cfg.force)
    params16, flops16 = fp16_fractions(src, policy, calls)
    return SearchResult(policy, kept, base_kept, order, trials.log, params16, flops16, confirm,
                        0.0, str(cfg.out), src.spec.name, len(src.x),
                        extra={"device": device, "ckpt": src.ckpt, "base": base.describe()})


def _run_search(trials: Trials, order: list) -> list:
    if trials.evaluate([], "all-fp16"):
        return []
    if not order or not trials.evaluate(order, "all-fp32"):
        raise CheckFailed(f"no policy passes parity: even with all {len(order)} candidate cells "
                          "in fp32 the network fails the thresholds",
                          "the breach lies outside leaf cells or the limits are too strict: "
                          "loosen them or search from a different base")
    return bisect(order, trials.evaluate)


def _final_policy(base, kept: list):
    from amptool.policy import make_policy

    cells = list(base.fp32_cells) + [c for c in kept if c not in base.fp32_cells]
    return make_policy(base.level, base.dtype, base.fp32_types, cells, base.fp16_cells)


def confirm_policy(src, policy, x, ref, th: Thresholds) -> dict:
    """One trial of ``policy`` on a fresh network set up by ``apply_policy``."""
    from amptool.checkpoint import build_with_weights
    from amptool.precision import apply_policy

    net = apply_policy(build_with_weights(src.spec, src.weights, src.ckpt), policy)
    ok, metrics = judge(ref, net(x).asnumpy(), src.y, th)
    return {"passed": ok, "metrics": metrics}


def fp16_fractions(src, policy, calls: list) -> tuple[float, float]:
    """Fractions of float parameters and of leaf-cell FLOPs left in the low dtype."""
    import mindspore as ms

    from amptool.checkpoint import build_with_weights
    from amptool.precision import low_precision_params, resolve_fp32_cells

    net = build_with_weights(src.spec, src.weights, src.ckpt)
    total = sum(int(p.size) for p in net.get_parameters() if p.dtype == ms.float32)
    low = sum(int(p.size) for p in low_precision_params(net, policy))
    kept = list(resolve_fp32_cells(net, policy))
    flops_all = sum(c.flops for c in calls)
    flops_low = sum(c.flops for c in calls
                    if not any(c.path == k or c.path.startswith(k + ".") for k in kept))
    return (low / total if total else 0.0), (flops_low / flops_all if flops_all else 0.0)
