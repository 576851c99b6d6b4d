"""metrics.jsonl, a run's step and epoch lines: what a resumed run keeps of it, and the loss
it holds for a step."""
from __future__ import annotations

import json
from pathlib import Path

from amptool.files.fileio import write_text


def _rows(path: Path) -> list:
    """(line, row) of each whole line of ``path`` (none when it does not exist)."""
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append((line, json.loads(line)))
            except ValueError:  # a line cut short by an interruption
                continue
    return rows


def trim_after(path: Path, step: int) -> None:
    """Drop the lines written after ``step`` (an interrupted epoch's steps)."""
    if not path.is_file():
        return
    # step and epoch lines both carry a step
    kept = [line for line, row in _rows(path) if row.get("step", 0) <= step]
    write_text(path, "".join(k + "\n" for k in kept))


def loss_at(path: Path, step: int) -> float:
    """The loss ``path`` holds for ``step`` (NaN when none)."""
    losses = [float(row["loss"]) for _, row in _rows(path)
              if row.get("step") == step and "loss" in row]
    return losses[-1] if losses else float("nan")
