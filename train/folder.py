"""The output folder of a training run: a resumed run's settings merged from the run it
continues (``merge_previous``), the refusal to train into a trained run without
``--resume`` or ``--overwrite`` (``claim_out_folder``), and the replaced run's files removed
once the new run is set up (``replace_run``)."""
from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Callable, Iterable

from amptool.documents.door import to_json
from amptool.documents.events import Overwrite
from amptool.errors import UsageError
from amptool.network.trust import vet_recorded, vet_recorded_code
from amptool.runs.rundir import RunDir

from .config import TrainConfig


def merge_previous(cfg: TrainConfig, explicit: Iterable[str] = ()) -> TrainConfig:
    """With ``cfg.resume``: the run in ``cfg.out`` supplies every setting that ``cfg`` leaves
    at its default; fields named in ``explicit`` (given on the command line or in a config
    file) and fields that differ from the default win; a model taken from the run runs only
    if ``trust.vet_recorded`` admits it. Without resume, ``cfg`` as it is."""
    if not cfg.resume:
        return cfg
    run_dir = RunDir(cfg.out)
    previous = run_dir.previous_config()
    defaults = TrainConfig()
    explicit = set(explicit)
    changes = {}
    for f in fields(TrainConfig):
        if f.name not in previous or f.name in explicit:
            continue
        if getattr(cfg, f.name) == getattr(defaults, f.name):
            changes[f.name] = previous[f.name]
    if "model" in changes:  # code named by a file runs only once vetted, as for export --run
        changes["model"] = vet_recorded(run_dir.model_reference())["model"]
    for what in ("loss", "metric"):  # the same for a loss or metric file the run names
        if changes.get(what):
            info = run_dir.read()
            kept = {"loss": info.loss, "metric": info.metric}[what]
            changes[what] = vet_recorded_code(changes[what], to_json(kept) if kept else None,
                                              run_dir.info_path, run_dir.path, what)
    return replace(cfg, **changes) if changes else cfg


def claim_out_folder(cfg: TrainConfig) -> list:
    """The files of the run in ``cfg.out`` (run.json, checkpoints) that a new run replaces:
    a UsageError when they hold a trained run (a checkpoint) and neither ``cfg.resume``
    continues it nor ``cfg.overwrite`` replaces it; the run.json of a run stopped before its
    first checkpoint, which holds nothing trained, without a flag; empty when resuming or
    nothing is there. Called with the folder held (``fileio.output_dir``), before the run's
    set-up."""
    found = RunDir(cfg.out).trained_files()
    if cfg.resume:
        return []
    if not found:
        return RunDir(cfg.out).unfinished_files()  # nothing trained is kept there
    if not cfg.overwrite:
        raise UsageError(f"{cfg.out} already holds a trained run "
                         f"({', '.join(p.name for p in found)})",
                         "pass --resume to continue it, --overwrite to replace it, or "
                         "another --out")
    return found


def replace_run(cfg: TrainConfig, found: list, emit: Callable[[Overwrite], None]) -> None:
    """Remove the replaced run's ``found`` files and its metrics (the new run rewrites the
    rest: its model copy, its auto policy) and say so in one ``overwrite`` event; called
    once the new run's set-up succeeded, so a mistake found there leaves the old run whole.
    Nothing when ``found`` is empty."""
    if not found:
        return
    for path in found + [Path(cfg.out) / "metrics.jsonl"]:
        path.unlink(missing_ok=True)
    emit(Overwrite(str(cfg.out), [p.name for p in found],
                   not any(p.suffix in (".ckpt", ".safetensors") for p in found)))
