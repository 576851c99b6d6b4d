"""Benchmark of ``amptool convert search``: trials and wall time per sample model.

Each model is trained briefly in fp32 on the bundled digits, then searched from the
all-fp16 base (O3) and from O2. Brute force means one trial per candidate cell; its
time is that count times the mean trial time measured in the same search.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("simplecnn", "lenet5", "resnet", "transformer", "trapmlp")
DEEP_TRAP = f"{__file__}:deep_trap"


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
    from amptool.train.loop import train_model

    return train_model(TrainConfig(model=model, amp_level="O0", epochs=epochs, out=str(out))).val_acc


def _search(run: Path, level: str, samples: int) -> dict:
    from amptool.convert.search import SearchConfig, search_policy

    stamps = []
    cfg = SearchConfig(run=str(run), level=level, samples=samples,
                       out=str(run / f"policy_{level}.toml"), force=True)
    t0 = time.perf_counter()
    result = search_policy(cfg, on_event=lambda e: stamps.append(time.perf_counter())
                           if e["kind"] in ("start", "trial") else None)
    wall = time.perf_counter() - t0
    trial_s = (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)
    cells = len(result.candidates)
    return {"level": level, "candidates": cells, "trials": result.n_trials,
            "kept": result.kept, "params_fp16": round(result.params_fp16, 4),
            "flops_fp16": round(result.flops_fp16, 4), "wall_s": round(wall, 2),
            "trial_s": round(trial_s, 3), "brute_force_trials": cells,
            "brute_force_s": round(cells * trial_s, 2),
            "trial_ratio": round(result.n_trials / cells, 3) if cells else None}


def run(quick: bool = False) -> dict:
    """Train each sample model briefly, search it from O3 and O2; return the figures."""
    os.environ.setdefault("GLOG_v", "3")
    models = ("simplecnn", "resnet", "trapmlp", DEEP_TRAP) if quick else MODELS + (DEEP_TRAP,)
    samples = 128 if quick else 256
    figures = {"samples": samples, "models": {}}
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        for model in models:
            name = "deep_trap" if model == DEEP_TRAP else model
            run_dir = Path(tmp) / name
            acc = _train(model, run_dir, 1 if quick else 2)
            rows = [_search(run_dir, level, samples) for level in ("O3", "O2")]
            figures["models"][name] = {"val_acc_fp32": round(acc, 4), "searches": rows}
    return figures


def _print(figures: dict) -> None:
    print(f"search benchmark, {figures['samples']} held-out digits per trial (CPU, PyNative)")
    print(f"{'model':<12} {'base':<4} {'cells':>5} {'trials':>6} {'ratio':>6} {'wall s':>7} "
          f"{'trial s':>7} {'brute s':>7}  kept in fp32")
    for model, row in figures["models"].items():
        for s in row["searches"]:
            print(f"{model:<12} {s['level']:<4} {s['candidates']:>5} {s['trials']:>6} "
                  f"{s['trial_ratio']:>6} {s['wall_s']:>7} {s['trial_s']:>7} "
                  f"{s['brute_force_s']:>7}  {', '.join(s['kept']) or '-'}")


if __name__ == "__main__":
    _print(run(quick="--quick" in sys.argv[1:]))
