"""``bench/overflow.py`` at 3 x 64 x 64, the size at which repvgg_a0 was reported to overflow.

Through a fresh network's running statistics (inference mode) the late RepVGG blocks' branch
sums pass 65504 at this size; a training step normalizes with the batch's statistics, and
``--policy auto`` measures those: ``ended`` says whether plain O2 finished or stopped as
diverged with the overflowing cell named ("same run as O2_auto" when nothing was kept).
"""
from __future__ import annotations

from bench.overflow import run as _run


def run(quick: bool = False) -> dict:
    return _run(quick, size=64)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
