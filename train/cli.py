"""``amptool train``: flags and config file into a TrainConfig, then ``run_training``
(imported when the command runs, so ``amptool --help`` stays light)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Union

import typer

from amptool.console import options as opt
from amptool.documents.events import (Epoch, Finished, Launch, Overwrite, Step, TrainEvent,
                                      TrainStart, Warned)
from amptool.errors import CheckFailed
from amptool.files.configfile import layered
from amptool.network.usercode import parse_model_args
from amptool.train.config import LaunchOptions, TrainConfig, build_command_config

if TYPE_CHECKING:
    from amptool.train.summary import TrainSummary


def _default(name: str) -> str:
    """The ``\\[default: …]`` of a training setting or launch option."""
    config = LaunchOptions if name in LaunchOptions.__dataclass_fields__ else TrainConfig
    return opt.default_of(config, name)


def _typed(kind: type, name: str, text: str) -> Any:
    """A None-defaulted option of type ``kind`` (a config file may set it) whose help ends
    in its default."""
    return Annotated[Optional[kind], typer.Option(help=f"{text} {_default(name)}")]


LossScaleOption = _typed(str, "loss_scale", "dynamic, static:VALUE or none.")
ScaleInitOption = _typed(float, "scale_init", "Initial dynamic loss scale.")
ScaleFactorOption = _typed(int, "scale_factor", "Dynamic loss scale factor.")
ScaleWindowOption = _typed(int, "scale_window", "Clean steps before the scale grows.")
MaxSkippedOption = _typed(int, "max_skipped", "Consecutive overflow steps that stop the run as "
                                              "diverged.")
LogEveryOption = _typed(int, "log_every", "Steps between read-backs of the loss and skip counts "
                                          "(one metrics.jsonl line each; the first and last "
                                          "step of an epoch too).")
LrOption = _typed(float, "lr", "Learning rate.")
OptimizerOption = _typed(str, "optimizer", "adam, sgd or momentum.")
ValFractionOption = _typed(float, "val_fraction", "Held-out validation fraction.")
CkptFormatOption = _typed(str, "ckpt_format", "ckpt or safetensors.")
ResumeOption = Annotated[bool, typer.Option(
    "--resume", help="Continue from the 'last' checkpoint in --out.")]
OverwriteOption = Annotated[bool, typer.Option(
    "--overwrite",
    help="Replace the trained run --out holds (refused without this or --resume).")]
WorkersOption = _typed(int, "workers", "Data-parallel workers on this host, launched with "
                                       "msrun.")
SinkSizeOption = _typed(int, "sink_size", "Steps per host call through MindSpore's data "
                                          "sinking (Ascend and GPU only; refused on CPU).")
DataWorkersOption = _typed(int, "data_workers", "Parallel workers reading, decoding and "
                                                "resizing the data ahead of the step.")
AugmentOption = _typed(str, "augment", "Training-only image augmentation: crop, flip or "
                                       "crop,flip (each image's draws fixed by seed, epoch and "
                                       "row).")
NodesOption = _typed(int, "nodes", "Hosts taking part (msrun); --workers is per host.")
NodeRankOption = _typed(int, "node_rank", "This host's rank among --nodes.")
MasterAddrOption = _typed(str, "master_addr", "Address of the rank-0 host (msrun).")
MasterPortOption = _typed(int, "master_port", "msrun's port; 0 picks a free one.")
StartTimeoutOption = _typed(float, "start_timeout", "Seconds every rank has to start and the "
                                                    "cluster to form before the job is "
                                                    "stopped.")


def train_command(
    model: opt.defaulted(opt.ModelOption, TrainConfig, "model") = None,
    model_arg: opt.ModelArgOption = None,
    input_spec: opt.InputSpecOption = None,
    trust_model: opt.noted(opt.TrustModelOption, "For --resume.") = None,
    data: opt.defaulted(opt.DataOption, TrainConfig, "data") = None,
    loss: opt.defaulted(opt.LossOption, TrainConfig, "loss") = None,
    metric: opt.defaulted(opt.TrainMetricOption, TrainConfig, "metric") = None,
    amp_level: opt.defaulted(opt.AmpLevelOption, TrainConfig, "amp_level") = None,
    policy: opt.PolicyFileOption = None,
    range_safety: opt.defaulted(opt.RangeSafetyOption, TrainConfig, "range_safety") = None,
    loss_scale: LossScaleOption = None,
    scale_init: ScaleInitOption = None,
    scale_factor: ScaleFactorOption = None,
    scale_window: ScaleWindowOption = None,
    max_skipped: MaxSkippedOption = None,
    log_every: LogEveryOption = None,
    epochs: opt.noted(opt.EpochsOption, "A resumed run continues up to it. "
                                        f"{_default('epochs')}") = None,
    batch_size: opt.defaulted(opt.BatchSizeOption, TrainConfig, "batch_size") = None,
    lr: LrOption = None,
    optimizer: OptimizerOption = None,
    seed: opt.defaulted(opt.SeedOption, TrainConfig, "seed") = None,
    device: opt.defaulted(opt.DeviceOption, TrainConfig, "device") = None,
    out: opt.defaulted(opt.OutOption, TrainConfig, "out") = None,
    val_fraction: ValFractionOption = None,
    ckpt_format: CkptFormatOption = None,
    resume: ResumeOption = False,
    overwrite: OverwriteOption = False,
    config: opt.ConfigOption = None,
    report: opt.noted(opt.ReportOption, "Without it: report.html in --out.") = None,
    workers: WorkersOption = None,
    sink_size: SinkSizeOption = None,
    data_workers: DataWorkersOption = None,
    augment: AugmentOption = None,
    nodes: NodesOption = None,
    node_rank: NodeRankOption = None,
    master_addr: MasterAddrOption = None,
    master_port: MasterPortOption = None,
    start_timeout: StartTimeoutOption = None,
    quiet: opt.about(opt.QuietOption, "the final summary") = False,
    as_json: opt.JsonOption = False,
) -> None:
    """Train a network with AMP and dynamic loss scaling; writes checkpoints and metrics.

    A --config file may set every option (snake_case keys); flags override it."""
    flags = dict(model=model, model_args=parse_model_args(model_arg) or None,
                 input_spec=input_spec, data=data, loss=loss, metric=metric,
                 amp_level=amp_level.upper() if amp_level else None,
                 policy=str(policy) if policy else None, range_safety=range_safety,
                 loss_scale=loss_scale,
                 scale_init=scale_init, scale_factor=scale_factor, scale_window=scale_window,
                 max_skipped=max_skipped, log_every=log_every, epochs=epochs,
                 batch_size=batch_size, lr=lr,
                 optimizer=optimizer, seed=seed, device=device, out=str(out) if out else None,
                 val_fraction=val_fraction, ckpt_format=ckpt_format, workers=workers,
                 data_workers=data_workers, augment=augment, sink_size=sink_size,
                 resume=resume or None, overwrite=overwrite or None)
    command_flags = dict(nodes=nodes, node_rank=node_rank, master_addr=master_addr,
                         master_port=master_port, start_timeout=start_timeout,
                         quiet=quiet or None, json=as_json or None)
    cfg, launch, as_json, explicit = _configs(config, flags, command_flags)
    html = opt.report_file(report, Path(cfg.out) / "report.html", Path(cfg.out))
    opt.consent(trust_model)
    _train(cfg, launch, explicit, html, as_json)


def _configs(config: Optional[Path], flags: dict, command_flags: dict) -> tuple:
    """(TrainConfig, LaunchOptions (quiet also with JSON output), JSON output, the settings
    given explicitly: in the ``--config`` file or as ``flags``)."""
    def build(file_values, given, source):
        return build_command_config(file_values, given, source), set(file_values)

    (cfg, launch, as_json), in_file = layered(build, config, {**flags, **command_flags})
    explicit = {k.replace("-", "_") for k in in_file} \
        | {k for k, v in flags.items() if v is not None}
    return cfg, replace(launch, quiet=launch.quiet or as_json), as_json, explicit


def _train(cfg: TrainConfig, launch: LaunchOptions, explicit: set, html: Optional[Path],
           as_json: bool) -> None:
    """Run the training with progress as ``launch`` asks; write the report (a diverged run's
    too) and print the summary. Of several hosts, the one that writes the run (node 0)
    writes the report."""
    from amptool.train.run import run_training, write_html

    html = html if launch.node_rank == 0 else None
    with _Reporter(launch.quiet) as reporter:
        try:
            summary = run_training(cfg, on_event=reporter.on_event, explicit=explicit,
                                   launch=launch)
        except CheckFailed as exc:  # a diverged run: its report shows it up to there
            if html is not None and Path(cfg.out).is_dir():
                write_html(html, cfg.out, False, exc.problem, exc.fix)
            raise
    if html is not None:
        write_html(html, summary.out, True, summary_line(summary),
                   seconds={"train": summary.seconds})
    _print_summary(summary, as_json)


def _print_summary(summary: TrainSummary, as_json: bool) -> None:
    if as_json:
        opt.print_json(summary.to_dict())
        return
    typer.echo(summary_line(summary))


def summary_line(summary: TrainSummary) -> str:
    """The one line a finished run is summed up in."""
    return (
        f"{'already finished' if summary.already_finished else 'done'}: "
        f"{summary.model} {summary.policy} on {summary.device}"
        f" x{summary.workers} | {score_text(summary)}"
        f" | {summary.steps} steps, {summary.overflow_steps} overflow steps skipped"
        f" | loss scale {summary.loss_scale:g} | {summary.samples_per_s:.0f} samples/s"
        f" | {summary.out}")


def score_text(figures: Union[TrainSummary, Epoch]) -> str:
    """``val acc A (best B)`` for accuracy; else the loss and the score that picks best."""
    if figures.val_acc is not None:
        return f"val acc {figures.val_acc:.4f} (best {figures.best_acc:.4f})"
    name = figures.score or "neg_val_loss"
    loss = figures.val_loss
    head = f"val loss {loss:.4g}" if loss is not None else "val loss -"
    best = figures.best_score
    if name == "neg_val_loss":
        return f"{head} (best {-best:.4g})" if best is not None else head
    return (f"{head} | metric {figures.val_score:.4g}"
            + (f" (best {best:.4g})" if best is not None else ""))


class _Reporter:
    """A rich progress bar on a terminal, plain lines otherwise, nothing with --quiet."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.progress = None
        self.task = None

    def __enter__(self):
        if not self.quiet and opt.is_tty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn())
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.stop()

    def _say(self, line: str) -> None:
        if self.progress:
            self.progress.console.print(line)
        else:
            typer.echo(line)

    def on_event(self, event: TrainEvent) -> None:
        if isinstance(event, Warned):  # on stderr, quiet or not
            typer.echo(f"amptool: warning: {event.message}", err=True)
        if self.quiet:
            return
        if isinstance(event, Overwrite) and event.unfinished:
            self._say(f"replacing the run in {event.out} that stopped before its first "
                      "checkpoint (its run.json; nothing trained was kept)")
        elif isinstance(event, Overwrite):
            self._say(f"overwriting the run in {event.out}: {', '.join(event.replaced)} "
                      "replaced")
        elif isinstance(event, Launch):
            self._say(f"launching {event.workers} workers through msrun (port {event.port}),"
                      f" logs in {event.logs}")
        elif isinstance(event, TrainStart):
            self._say(f"training on {event.device}, policy {event.policy}, loss scale "
                      f"{event.loss_scale}, "
                      f"epochs {event.start_epoch + 1}..{event.epochs}")
            if self.progress:
                self.task = self.progress.add_task(
                    "train", total=event.epochs * event.steps_per_epoch,
                    completed=event.start_epoch * event.steps_per_epoch, info="")
        elif isinstance(event, Step) and self.progress:
            self.progress.update(self.task, completed=event.step, info=(
                f"epoch {event.epoch} loss {event.loss:.4f} scale {event.loss_scale:g}"
                + (f" {event.skipped} skipped" if event.skipped else "")))
        elif isinstance(event, Finished):
            self._say(f"nothing to train: {event.out} already holds {event.epochs} epochs "
                      f"(--epochs is the total; pass a larger one to continue)")
        elif isinstance(event, Epoch):
            if event.val_acc is not None:
                self._say(f"epoch {event.epoch}: loss {event.loss:.4f} "
                          f"val acc {event.val_acc:.4f} best {event.best_acc:.4f}")
            else:
                self._say(f"epoch {event.epoch}: loss {event.loss:.4f} "
                          f"{score_text(event)}")


def register(app: typer.Typer) -> None:
    app.command("train")(opt.handle_errors(train_command))
