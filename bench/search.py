"""Benchmark of ``amptool convert search``: trials and wall time per sample model.

Each model is trained briefly in fp32 on the bundled digits, then searched from the
all-fp16 base (O3) and from O2. On the models in ``BRUTE_FORCE`` a brute force runs
too, timed: one trial per candidate cell (that cell alone in fp16, every other
candidate in fp32), on the same eager network, inputs, reference and thresholds, set
up the way the search sets itself up. Its time counts set-up and trials only (no graph
mode confirmation, no policy file), so the search is not flattered. Brute force and
search run in alternation for a few rounds (medians), after each model's first searches.
A trial's cost depends on how much of the network runs in fp16 (on CPU, fp16 kernels are
slower than fp32 ones): the brute force's trials are mostly fp32, the search's mostly fp16.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("simplecnn", "lenet5", "resnet", "transformer", "trapmlp")
DEEP_TRAP = f"{__file__}:deep_trap"
BRUTE_FORCE = {"quick": (("deep_trap", "O3"),), "full": (("deep_trap", "O3"), ("resnet", "O3"))}


def deep_trap():
    """A 10-layer MLP with fp16-unsafe L2 normalizations (gain 4096, then x8)
    planted after layers 2 and 7: 26 leaf cells, where bisection pays off against one
    trial per cell."""
    from mindspore import nn

    from amptool.samples.models import L2Normalize

    class Gain(nn.Cell):
        def construct(self, x):
            return x * 8.0

    layers = [nn.Flatten(), nn.Dense(28 * 28, 128), nn.ReLU()]
    for i in range(1, 10):
        if i in (2, 7):
            layers += [L2Normalize(gain=4096.0), Gain()]
        layers += [nn.Dense(128, 128), nn.ReLU()]
    layers.append(nn.Dense(128, 10))
    net = nn.SequentialCell(layers)
    net.input_shape, net.num_classes = (1, 28, 28), 10
    return net


def _train(model: str, out: Path, epochs: int) -> float:
    from amptool.train.config import TrainConfig
    from amptool.train.run import run_training

    summary = run_training(TrainConfig(model=model, amp_level="O0", epochs=epochs, out=str(out)))
    return summary.val_acc


def _search(run: Path, level: str, samples: int) -> dict:
    from amptool.convert.search import SearchConfig, search_policy

    stamps = []
    cfg = SearchConfig(run=str(run), level=level, samples=samples,
                       out=str(run / f"policy_{level}.toml"), force=True)
    t0 = time.perf_counter()
    result = search_policy(cfg, on_event=lambda e: stamps.append(time.perf_counter())
                           if e.kind in ("start", "trial") else None)
    wall = time.perf_counter() - t0
    cells = len(result.candidates)
    return {"level": level, "candidates": cells, "trials": result.n_trials,
            "kept": result.kept, "params_fp16": round(result.params_fp16, 4),
            "flops_fp16": round(result.flops_fp16, 4), "wall_s": round(wall, 2),
            "trials_s": round(stamps[-1] - stamps[0], 3),
            "trial_ratio": round(result.n_trials / cells, 3) if cells else None}


def brute_force(run: Path, level: str, samples: int) -> dict:
    """One timed trial per candidate cell, set up as ``convert/search.py`` sets up a search."""
    import mindspore as ms

    from amptool.convert.search import SearchConfig, Trials, base_policy, search_thresholds
    from amptool.convert.subject import load_subject
    from amptool.convert.trace import record_execution
    from amptool.network.checkpoint import build_with_weights
    from amptool.precision.apply import resolve_fp32_cells, within
    from amptool.runtime.device import resolve_device, set_device

    cfg = SearchConfig(run=str(run), level=level, samples=samples)
    base = base_policy(cfg)
    previous = ms.get_context("mode")
    set_device(resolve_device(cfg.device), graph=False)
    try:
        t0 = time.perf_counter()
        src = load_subject(cfg.run, cfg.ckpt, cfg.model, cfg.data, cfg.samples)
        net = build_with_weights(src.spec, src.weights, f"checkpoint {src.ckpt}")
        x = ms.Tensor(src.x)
        ref, calls = record_execution(net, x)
        base_kept = list(resolve_fp32_cells(net, base))
        order = [c.path for c in calls if c.path not in base.fp16_cells
                 and not any(within(c.path, k) for k in base_kept)]
        trials = Trials(net, base, x, ref, src.y, search_thresholds(cfg, src.classifier),
                        lambda event: None, src.classifier)
        trials.add_candidates(order)
        t1 = time.perf_counter()
        failing = [c for c in order if not trials.evaluate([o for o in order if o != c], "brute")]
        t2 = time.perf_counter()
    finally:
        ms.set_context(mode=previous)
    return {"level": level, "trials": len(order), "wall_s": round(t2 - t0, 2),
            "trials_s": round(t2 - t1, 3), "fail_alone_in_fp16": failing}


def compare_brute_force(run_dir: Path, level: str, samples: int, rounds: int) -> dict:
    """The search and the brute force in alternation (neither gets the warmer caches
    every time); medians of the rounds."""
    searches, forced = [], []
    for _ in range(rounds):
        forced.append(brute_force(run_dir, level, samples))
        searches.append(_search(run_dir, level, samples))
    s, b = searches[-1], forced[-1]

    def median(rows, key):
        return round(statistics.median(r[key] for r in rows), 3)

    wall_s, brute_s = median(searches, "wall_s"), median(forced, "wall_s")
    return {"level": level, "rounds": rounds, "search_trials": s["trials"], "search_wall_s": wall_s,
            "search_trials_s": median(searches, "trials_s"), "search_kept": s["kept"],
            "brute_force_trials": b["trials"], "brute_force_wall_s": brute_s,
            "brute_force_trials_s": median(forced, "trials_s"),
            "brute_force_fail_alone": b["fail_alone_in_fp16"],
            "search_vs_brute_force_wall_ratio": round(wall_s / brute_s, 3),
            "search_vs_brute_force_trial_time_ratio": round(
                median(searches, "trials_s") / median(forced, "trials_s"), 3),
            "search_vs_brute_force_trials_ratio": round(s["trials"] / b["trials"], 3)}


def run(quick: bool = False) -> dict:
    """Train each sample model briefly, search it from O3 and O2; return the figures."""
    os.environ.setdefault("GLOG_v", "3")
    models = ("simplecnn", "resnet", "trapmlp", DEEP_TRAP) if quick else MODELS + (DEEP_TRAP,)
    samples = 128 if quick else 256
    brute = dict(BRUTE_FORCE["quick" if quick else "full"])
    figures = {"samples": samples, "models": {}, "brute_force": {}}
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        for model in models:
            name = "deep_trap" if model == DEEP_TRAP else model
            run_dir = Path(tmp) / name
            acc = _train(model, run_dir, 1 if quick else 2)
            rows = [_search(run_dir, level, samples) for level in ("O3", "O2")]
            figures["models"][name] = {"val_acc_fp32": round(acc, 4), "searches": rows}
            if name in brute:
                figures["brute_force"][name] = compare_brute_force(run_dir, brute[name], samples,
                                                                   2 if quick else 3)
    return figures


def _print(figures: dict) -> None:
    print(f"search benchmark, {figures['samples']} held-out digits per trial (CPU, PyNative)")
    print(f"{'model':<12} {'base':<4} {'cells':>5} {'trials':>6} {'ratio':>6} {'wall s':>7} "
          f"{'trials s':>8}  kept in fp32")
    for model, row in figures["models"].items():
        for s in row["searches"]:
            print(f"{model:<12} {s['level']:<4} {s['candidates']:>5} {s['trials']:>6} "
                  f"{s['trial_ratio']:>6} {s['wall_s']:>7} {s['trials_s']:>8}  "
                  f"{', '.join(s['kept']) or '-'}")
    for model, b in figures["brute_force"].items():
        print(f"brute force, {model} {b['level']}: {b['brute_force_trials']} trials in "
              f"{b['brute_force_wall_s']} s (search: {b['search_trials']} trials in "
              f"{b['search_wall_s']} s); cells failing alone in fp16: "
              f"{', '.join(b['brute_force_fail_alone']) or '-'}")


if __name__ == "__main__":
    _print(run(quick="--quick" in sys.argv[1:]))
