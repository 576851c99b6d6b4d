"""oneDNN's instruction set: the default pipeline (``amptool run --epochs 1``) with the
AVX2 cap amptool sets (``amptool.runtime.device.CPU_ISA``) against oneDNN left free to use AVX-512
(``ONEDNN_MAX_CPU_ISA=ALL``).

Each setting runs as a fresh process in its own folder, interleaved round by round so both
see the same machine load; the figures are the medians of the wall seconds of the whole
command and of the train and parity stages (as ``amptool run`` reports them). On a host
without AVX-512 both settings are the same and the ratios are about 1.
"""
from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import amptool_command

STAGES = re.compile(r"train ([\d.]+) s, export ([\d.]+) s, parity ([\d.]+) s")


def _avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _once(isa: str, folder: Path, epochs: int) -> dict:
    env = dict(os.environ, GLOG_v="3")
    if isa == "default":
        env.pop("ONEDNN_MAX_CPU_ISA", None)
    else:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    done = subprocess.run(amptool_command() + ["run", "--epochs", str(epochs), "--report", "off",
                                        "--out", "run"],
                          cwd=folder, env=env, capture_output=True, text=True, check=True)
    total = time.perf_counter() - t0
    train, export, parity = (float(v) for v in STAGES.search(done.stdout).groups())
    return {"total": total, "train": train, "export": export, "parity": parity}


def run(quick: bool = False) -> dict:
    rounds = 1 if quick else 3
    samples: dict = {"default": [], "ALL": []}
    with tempfile.TemporaryDirectory(prefix="amptool-bench-isa-") as tmp:
        for _ in range(rounds):
            for isa in samples:
                samples[isa].append(_once(isa, Path(tmp) / isa, 1))
    med = {isa: {k: statistics.median(s[k] for s in runs) for k in runs[0]}
           for isa, runs in samples.items()}
    figures: dict = {"rounds": rounds, "avx512": _avx512()}
    for isa, name in (("default", "avx2"), ("ALL", "all")):
        for key, value in med[isa].items():
            figures[f"{name}_{key}_s"] = round(value, 2)
    for key in ("total", "train", "parity"):
        figures[f"{key}_speedup_ratio"] = round(med["ALL"][key] / med["default"][key], 2)
    figures["targets"] = {"total_speedup_ratio": ">= 1 (about 1 without AVX-512)"}
    return figures


if __name__ == "__main__":
    f = run(quick="--quick" in sys.argv[1:])
    print(f"amptool run --epochs 1: AVX2 cap {f['avx2_total_s']} s, oneDNN free "
          f"{f['all_total_s']} s: {f['total_speedup_ratio']}x (train "
          f"{f['train_speedup_ratio']}x, parity {f['parity_speedup_ratio']}x; AVX-512 host: "
          f"{f['avx512']})")
