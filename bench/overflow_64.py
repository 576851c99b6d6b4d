"""``bench/overflow.py`` at 3 x 64 x 64, where repvgg_a0's fp16 forward pass overflows.

At this size the branch sums of the late RepVGG blocks exceed 65504 in fp16 from the first
step, so plain O2 must stop as diverged with the overflowing cell named, while
``--policy auto`` keeps those cells in fp32 before the first step and trains.
"""
from __future__ import annotations

from bench.overflow import run as _run


def run(quick: bool = False) -> dict:
    return _run(quick, size=64)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
