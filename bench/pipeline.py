"""Wall time of ``amptool run`` (train, export fp32+fp16, parity) against ``amptool train``.

Both are fresh processes with the same model, data and epochs, run in alternation, so the
ratio says what the export and parity stages add on top of training on this machine.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import amptool_command


def _wall(args: list) -> tuple:
    env = dict(os.environ, GLOG_v=os.environ.get("GLOG_v", "3"))
    t0 = time.perf_counter()
    done = subprocess.run(amptool_command() + args, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"amptool {args[0]} failed: {done.stderr.strip()[-300:]}")
    return wall, json.loads(done.stdout)


def run(quick: bool = False) -> dict:
    """Median wall seconds of ``amptool run`` and ``amptool train`` and their ratio."""
    epochs, rounds = (1, 1) if quick else (2, 3)
    runs, trains, stages = [], [], {}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        for i in range(rounds):
            wall, summary = _wall(["run", "--epochs", str(epochs), "--out", f"{tmp}/run{i}",
                                   "--json"])
            runs.append(wall)
            stages = {f"{k}_s": v for k, v in summary.get("seconds_by_stage", {}).items()}
            trains.append(_wall(["train", "--epochs", str(epochs), "--out", f"{tmp}/train{i}",
                                 "--json"])[0])
    run_s, train_s = statistics.median(runs), statistics.median(trains)
    return {"epochs": epochs, "rounds": rounds, "amptool_run_s": round(run_s, 2),
            "amptool_train_s": round(train_s, 2), "stages": stages,
            "run_vs_train_ratio": round(run_s / train_s, 3)}


if __name__ == "__main__":
    figures = run(quick="--quick" in sys.argv[1:])
    print(f"amptool run {figures['amptool_run_s']:.1f} s | amptool train "
          f"{figures['amptool_train_s']:.1f} s | run/train {figures['run_vs_train_ratio']:.2f}x "
          f"({figures['epochs']} epoch(s), median of {figures['rounds']})")
