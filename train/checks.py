"""``validate``: every problem of a training config, found at once before any work.

The options' values, what they name (the model, its input signature, the data, the loss and
metric as written: checked without MindSpore and without running the user's code) and the
output folder (writable, holding the checkpoint a resume needs) are all checked; the
problems come back in one ``UsageError``. Claiming the folder is no check: the run does it
with the folder held (``folder.claim_out_folder``)."""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

from amptool.data.dataset import parse_augment
from amptool.data.sources import parse_data_spec
from amptool.errors import UsageError, raise_problems
from amptool.files.fileio import check_out_dir
from amptool.network.checkpoint import FORMATS as CKPT_FORMATS
from amptool.network.losses import FIX, parse_builtin
from amptool.network.models import check_reference
from amptool.network.signature import parse_signature
from amptool.network.taskmetric import check_metric_spec
from amptool.precision.policy import LEVELS
from amptool.precision.safety import check_range_safety
from amptool.runs.rundir import RunDir

from .config import AUTO, TrainConfig
from .sink import check_sink_size

VALUE_FIX = "fix the options or config file"
"""The fix of a value out of its range."""


def validate(cfg: TrainConfig, folder: bool = True) -> None:
    """Raise one UsageError naming every problem of ``cfg`` (with ``folder``, of its output
    folder too); nothing when there is none (``amptool.errors.raise_problems``)."""
    raise_problems(problems(cfg, folder))


def problems(cfg: TrainConfig, folder: bool = True) -> list:
    """(problem, fix) of every mistake of ``cfg`` (with ``folder``, of its output folder
    too): what ``validate`` raises."""
    found = (_level_problems(cfg) + [(p, VALUE_FIX) for p in _value_problems(cfg)]
             + _reference_problems(cfg))
    return found + _folder_problems(cfg) if folder else found


def _level_problems(cfg: TrainConfig) -> list:
    """(problem, fix) of the AMP level and of ``--policy auto`` at a level it cannot use."""
    problems = []
    if cfg.amp_level not in LEVELS:
        problems.append((f"unknown AMP level '{cfg.amp_level}'", "use O0, O1, O2 or O3"))
    if cfg.policy == AUTO and cfg.amp_level in ("O0", "O1"):
        problems.append((f"--policy auto has nothing to keep in fp32 at {cfg.amp_level} (it "
                         "keeps cells of an O2 or O3 network)",
                         "use --amp-level O2 or O3 with it"))
    return problems


def _value_problems(cfg: TrainConfig) -> list:
    """The values out of their range, each one problem."""
    problems = _raised(check_range_safety, cfg.range_safety)
    if cfg.epochs < 1:
        problems.append(f"epochs must be >= 1 (got {cfg.epochs})")
    if cfg.batch_size < 1:
        problems.append(f"batch size must be >= 1 (got {cfg.batch_size})")
    if not cfg.lr > 0:
        problems.append(f"learning rate must be > 0 (got {cfg.lr})")
    if cfg.max_skipped < 1:
        problems.append(f"max skipped steps must be >= 1 (got {cfg.max_skipped})")
    if cfg.log_every < 1:
        problems.append(f"log every must be >= 1 step (got {cfg.log_every})")
    if cfg.ckpt_format not in CKPT_FORMATS:
        problems.append(f"unknown checkpoint format '{cfg.ckpt_format}' (use ckpt or safetensors)")
    if cfg.workers < 1:
        problems.append(f"workers must be >= 1 (got {cfg.workers})")
    if cfg.data_workers is not None and cfg.data_workers < 1:
        problems.append(f"data workers must be >= 1 (got {cfg.data_workers})")
    problems += _raised(parse_augment, cfg.augment)
    if cfg.resume and cfg.overwrite:
        problems.append("resume continues the run in the output folder and overwrite replaces "
                        "it: pass one of them")
    problems += _task_problems(cfg)
    if cfg.model_args is not None and not isinstance(cfg.model_args, dict):
        problems.append("model_args must be a mapping of keyword arguments "
                        f"(got {cfg.model_args!r})")
    return problems


def _task_problems(cfg: TrainConfig) -> list:
    """What is wrong with ``loss`` and ``metric`` as written (their code is not run here)."""
    problems = []
    if cfg.loss is not None:
        try:
            known = isinstance(cfg.loss, str) and (parse_builtin(cfg.loss) is not None
                                                   or ":" in cfg.loss)
        except UsageError as exc:
            problems.append(exc.problem)
            known = True
        if not known:
            problems.append(f"unknown loss {cfg.loss!r} ({FIX})")
    if cfg.metric is not None:
        problems += _raised(check_metric_spec, cfg.metric)
    return problems


def _reference_problems(cfg: TrainConfig) -> list:
    """(problem, fix) of what the options name (the model, its signature, the data) as far
    as it can be told without MindSpore, and of the sink size."""
    checks: List[Tuple[Callable[[Any], object], Any]] = [(check_sink_size, cfg.sink_size),
                                                         (check_reference, cfg.model)]
    if cfg.input_spec:
        checks.append((lambda spec: parse_signature(spec, "--input-spec"), cfg.input_spec))
    if isinstance(cfg.data, str) and cfg.data:
        checks.append((parse_data_spec, cfg.data))
    return [found for check, value in checks for found in _raised(check, value, fix=True)]


def _folder_problems(cfg: TrainConfig) -> list:
    """(problem, fix) of the output folder: one the run cannot create or write, or, with
    ``resume``, one without the run's ``last`` checkpoint (in its checkpoint format)."""
    problems = _raised(check_out_dir, cfg.out, fix=True)
    if problems or not cfg.resume or cfg.ckpt_format not in CKPT_FORMATS:
        return problems
    last = RunDir(cfg.out).checkpoint_path("last", cfg.ckpt_format)
    if not last.is_file():
        problems.append((f"--resume: no checkpoint {last.name} in {cfg.out}",
                         "train without --resume first, or point --out at an earlier run"))
    return problems


def _raised(check, value, fix: bool = False) -> list:
    """The problem (with ``fix``: (problem, fix)) of the UsageError ``check(value)`` raises;
    empty when it raises none."""
    try:
        check(value)
    except UsageError as exc:
        return [(exc.problem, exc.fix) if fix else exc.problem]
    return []
