"""``run_training``: the one entry to training, in one process or across msrun workers.

The CLI, the Python API and the pipeline all come through here, so a resumed run merges
the previous run's settings the same way from each. ``write_html``: a run's report.html, as
``amptool train`` writes it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Optional

from amptool.documents.events import TrainEvent
from amptool.files.fileio import output_dir
from amptool.report.html import ReportPage, write_report

from .checks import validate
from .config import LaunchOptions, TrainConfig
from .folder import claim_out_folder, merge_previous, replace_run
from .launch import launch_workers
from .loop import train_model
from .summary import TrainSummary

Callback = Optional[Callable[[TrainEvent], None]]


def run_training(cfg: TrainConfig, on_event: Callback = None, explicit: Iterable[str] = (),
                 launch: Optional[LaunchOptions] = None) -> TrainSummary:
    """Train under ``cfg``; ``explicit`` names the settings the caller gave on purpose
    (with ``resume`` they win over the previous run's, like any non-default value);
    ``on_event`` is handed each ``TrainEvent`` (``amptool.documents.events``) as it happens."""
    cfg = merge_previous(cfg, explicit)
    launch = launch or LaunchOptions()
    if cfg.workers > 1 or launch.nodes > 1:
        validate(cfg)
        with output_dir(cfg.out):  # the launcher holds the folder for its workers
            replace_run(cfg, claim_out_folder(cfg), on_event or (lambda event: None))
            summary = launch_workers(cfg, nodes=launch.nodes, node_rank=launch.node_rank,
                                     master_addr=launch.master_addr,
                                     master_port=launch.master_port, quiet=launch.quiet,
                                     on_event=on_event, start_timeout=launch.start_timeout)
        return TrainSummary.from_dict(summary)
    return train_model(cfg, on_event=on_event)


def write_html(path: Path, out: str, passed: bool, line: str, fix: Optional[str] = None,
               seconds: Optional[dict] = None) -> None:
    """report.html at ``path`` of the training run in ``out`` (a diverged one's too):
    ``line`` sums it up, ``fix`` says what to do when it did not pass."""
    write_report(path, ReportPage("train", passed, line, fix, run_folder=str(out),
                                  seconds=seconds or {}))
