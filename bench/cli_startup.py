"""Start-up time of the command line: ``amptool --help`` against ``import mindspore``.

Each command runs as a fresh process, interleaved round by round, so both see the same
machine load; the figure is the median over the rounds. ``python -c pass`` is the floor.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from bench import amptool_command


def commands() -> dict:
    return {"python": [sys.executable, "-c", "pass"],
            "amptool_help": amptool_command() + ["--help"],
            "import_mindspore": [sys.executable, "-c", "import mindspore"]}


def _time(cmd: list, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - t0


def run(quick: bool = False) -> dict:
    """Median wall seconds of each command over interleaved rounds, and their ratios."""
    env = dict(os.environ, GLOG_v=os.environ.get("GLOG_v", "3"))
    cmds = commands()
    for cmd in cmds.values():  # warm the file cache once
        _time(cmd, env)
    rounds = 3 if quick else 9
    samples = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            samples[name].append(_time(cmd, env))
    med = {name: statistics.median(values) for name, values in samples.items()}
    return {"rounds": rounds,
            "python_s": round(med["python"], 3),
            "amptool_help_s": round(med["amptool_help"], 3),
            "import_mindspore_s": round(med["import_mindspore"], 3),
            "help_vs_import_mindspore_ratio": round(med["amptool_help"]
                                                    / med["import_mindspore"], 3),
            "help_vs_bare_python_ratio": round(med["amptool_help"] / med["python"], 3),
            # amptool --help < 0.3 s where import mindspore takes 1.6 s (unloaded machine)
            "targets": {"help_vs_import_mindspore_ratio": "<= 0.2"}}


if __name__ == "__main__":
    figures = run(quick="--quick" in sys.argv[1:])
    print(f"amptool --help {figures['amptool_help_s']:.3f} s | import mindspore "
          f"{figures['import_mindspore_s']:.3f} s | python -c pass {figures['python_s']:.3f} s | "
          f"help/import {figures['help_vs_import_mindspore_ratio']:.2f}x "
          f"(median of {figures['rounds']} interleaved rounds)")
