"""Streaming data: peak memory of ``amptool train --data imagefolder:DIR`` against the
folder's size, and the pipeline's own speed.

Two folders of generated 32 x 32 RGB PNG images in 10 classes, SMALL and LARGE images
(10x apart), each trained for one epoch by a fresh ``amptool train`` process (simplecnn,
O2, the default pipeline workers). Figures: each run's peak RSS (``wait4``'s
``ru_maxrss``), their ratio, and the images/s of the pipeline alone (list, decode,
resize and standardize one epoch of LARGE, no training). Target: peak RSS on LARGE is
at most 1.2 x that on SMALL: nothing grows with the number of images but the file list.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import amptool_command

SMALL, LARGE = 2_000, 20_000
SIZE = 32
CLASSES = 10


def _make_folder(root: Path, count: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(count)
    for c in range(CLASSES):
        (root / f"class{c:02d}").mkdir(parents=True)
    for i in range(count):
        c = i % CLASSES
        base = np.full((SIZE, SIZE, 3), 25 * c, np.uint8)  # learnable: class sets the level
        noise = rng.integers(0, 40, (SIZE, SIZE, 3), dtype=np.uint8)
        Image.fromarray(base + noise).save(root / f"class{c:02d}" / f"{i:06d}.png")
    return root


def _train(folder: Path, out: Path) -> dict:
    cmd = amptool_command() + ["train", "--data", f"imagefolder:{folder}", "--epochs", "1",
                        "--out", str(out), "--json"]
    env = dict(os.environ, GLOG_v=os.environ.get("GLOG_v", "3"))
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        out_text, err_text = stdout.read(), stderr.read()
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"amptool train failed ({proc.returncode}): {err_text.strip()[-400:]}")
    summary = json.loads(out_text)
    return {"images": summary.get("steps", 0) * 32, "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "seconds": round(seconds, 1), "val_acc": round(summary["val_acc"], 4),
            "samples_per_s": round(summary["samples_per_s"], 1)}


def _pipeline_rate(folder: Path) -> float:
    """Images/s of the data pipeline alone over one epoch of ``folder``."""
    from amptool.data.dataset import epoch_batches, load_model_data
    from amptool.network.models import resolve_model

    data = load_model_data(f"imagefolder:{folder}", resolve_model("simplecnn"))
    order = list(epoch_batches(len(data.train_idx), 32, 0, 0))
    t0 = time.perf_counter()
    count = sum(len(y) for _, y in data.train_batches(order))
    return count / (time.perf_counter() - t0)


def run(quick: bool = False) -> dict:
    from amptool.runtime.device import set_device

    set_device("CPU")
    small, large = (200, 2_000) if quick else (SMALL, LARGE)
    with tempfile.TemporaryDirectory(prefix="amptool-bench-memory-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        folders = {n: _make_folder(root / f"images{n}", n) for n in (small, large)}
        made = time.perf_counter() - t0
        runs = {}
        for n, folder in folders.items():  # the small one first, then the large one
            runs[str(n)] = _train(folder, root / f"run{n}")
        rate = _pipeline_rate(folders[large])
    ratio = runs[str(large)]["peak_rss_mb"] / runs[str(small)]["peak_rss_mb"]
    return {"image": f"3x{SIZE}x{SIZE} png", "classes": CLASSES, "model": "simplecnn O2",
            "generate_s": round(made, 1), "runs": runs, "peak_rss_ratio": round(ratio, 3),
            "pipeline_images_per_s": round(rate, 1),
            "targets": {"peak_rss_ratio": "<= 1.2"}}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
