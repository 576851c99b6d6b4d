"""The search's bisection over cells, given a trial that says whether a set of cells kept in
fp32 passes.

It works on blocks, then inside them (``bisect_cells``): it bisects over the network's
top-level cells in execution order (a segment that passes in fp16 stays fp16, a failing
segment is halved, a failing single cell is kept fp32, then each kept cell is tried in fp16
once more). A kept block is then split: if the rest of the network passes with only its
sub-cells kept (its own ``construct`` in fp16), the same bisection runs over those
sub-cells; if not, the block's own operators need fp32 and it stays whole. Cells are paths
(``a.b.c``); nothing here runs a network.
"""
from __future__ import annotations

import functools
from typing import Callable

from amptool.precision.apply import within


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


def in_order(leaves: list, cells) -> list:
    """``cells`` (leaves and blocks) in execution order: each at its first leaf in ``leaves``,
    a block before its own first leaf."""
    cells = list(dict.fromkeys(cells))
    first = {c: next((i for i, leaf in enumerate(leaves) if within(leaf, c)), len(leaves))
             for c in cells}
    return sorted(cells, key=lambda c: (first[c], c.count(".")))


def sub_units(leaves: list, unit: str, avoid=()) -> list:
    """The cells one level below ``unit`` ('' for the network) that hold candidate leaves,
    in execution order; a chain of single sub-cells is skipped down to where it splits,
    and a cell holding one of ``avoid`` (cells the base forces to low precision) is
    replaced by its own sub-cells."""
    while True:
        depth = unit.count(".") + 1 if unit else 0
        parts = in_order(leaves, {".".join(leaf.split(".")[:depth + 1]) for leaf in leaves
                                  if within(leaf, unit) and leaf != unit})
        if any(p not in leaves and any(within(a, p) for a in avoid) for p in parts):
            return in_order(leaves, [q for p in parts for q in (
                sub_units(leaves, p, avoid) if p not in leaves
                and any(within(a, p) for a in avoid) else [p])])
        if len(parts) != 1 or parts[0] in leaves:
            return parts
        unit = parts[0]


def _with_kept(trial: Callable[[list, str], bool], others: list, cells: list,
               phase: str) -> bool:
    return trial(others + cells, phase)


def bisect_cells(leaves: list, trial: Callable[[list, str], bool], avoid=()) -> list:
    """Cells to keep in fp32 (blocks where their own operators need it, else the cells
    inside them), given that every candidate leaf in fp32 passes and none fails; no kept
    block holds a cell of ``avoid``."""
    kept = bisect(sub_units(leaves, "", avoid), trial)
    queue = [u for u in kept if u not in leaves]
    while queue:
        unit = queue.pop(0)
        parts = sub_units(leaves, unit, avoid)
        others = [k for k in kept if k != unit]
        if not trial(others + parts, "split"):
            continue  # the block's own construct needs fp32: it stays whole
        found = bisect(parts, functools.partial(_with_kept, trial, others))
        if found == parts:
            continue  # every part is needed: that is the block, its own construct included
        kept = in_order(leaves, others + found)
        queue += [u for u in found if u not in leaves]
    return in_order(leaves, kept)
