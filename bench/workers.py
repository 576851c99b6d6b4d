"""Data-parallel throughput on this host: 1 worker against 2 msrun workers.

Both runs train simplecnn on the bundled digits with the same per-worker batch, one after
the other in the same benchmark run, each as a fresh ``amptool train`` process. Throughput
is the training loop's global samples/s (compilation steps excluded); wall time includes
msrun's start-up. The full run adds one worker at the 2-worker global batch.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import amptool_command

BATCH = 32


def _train(out: Path, workers: int, batch: int, epochs: int) -> dict:
    cmd = amptool_command() + ["train", "--workers", str(workers), "--batch-size", str(batch),
                        "--epochs", str(epochs), "--out", str(out), "--json"]
    env = dict(os.environ, GLOG_v=os.environ.get("GLOG_v", "3"))
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"amptool train --workers {workers} failed: "
                           f"{done.stderr.strip()[-300:]}")
    summary = json.loads(done.stdout)
    return {"workers": workers, "global_batch": batch * workers,
            "samples_per_s": round(summary["samples_per_s"], 1), "wall_s": round(wall, 2),
            "val_acc": round(summary["val_acc"], 4)}


def run(quick: bool = False) -> dict:
    """Train with 1 and 2 workers side by side; throughput and wall-time ratios."""
    epochs = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        one = _train(Path(tmp) / "one", 1, BATCH, epochs)
        two = _train(Path(tmp) / "two", 2, BATCH, epochs)
        same = None if quick else _train(Path(tmp) / "same", 1, 2 * BATCH, epochs)
    figures = {"cpu_cores": os.cpu_count(), "epochs": epochs, "per_worker_batch": BATCH,
               "runs": [r for r in (one, two, same) if r],
               "throughput_2_vs_1_ratio": round(two["samples_per_s"] / one["samples_per_s"], 3),
               "wall_2_vs_1_ratio": round(two["wall_s"] / one["wall_s"], 3)}
    if same:
        figures["throughput_2_vs_1_same_global_batch_ratio"] = round(
            two["samples_per_s"] / same["samples_per_s"], 3)
    return figures


if __name__ == "__main__":
    figures = run(quick="--quick" in sys.argv[1:])
    for r in figures["runs"]:
        print(f"{r['workers']} worker(s), global batch {r['global_batch']}: "
              f"{r['samples_per_s']:.0f} samples/s, wall {r['wall_s']:.1f} s, "
              f"val acc {r['val_acc']:.3f}")
    print(f"2 vs 1 workers: throughput {figures['throughput_2_vs_1_ratio']:.2f}x, "
          f"wall {figures['wall_2_vs_1_ratio']:.2f}x on {figures['cpu_cores']} cores")
