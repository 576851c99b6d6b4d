"""The ``amptool`` command line: the root app, ``info``, ``run`` and each stage's commands.

The commands import configs; each imports the library it calls when it runs (one import a
command), so ``amptool --help`` imports neither numpy nor MindSpore.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from amptool.console import options as opt
from amptool.console.hostinfo import host_info
from amptool.convert import cli as convert_cli
from amptool.documents.events import Epoch, Overwrite, PipelineEvent, Stage, Warned
from amptool.export import cli as export_cli
from amptool.gate import cli as gate_cli
from amptool.gate.diff_cli import BaselineOption
from amptool.network.usercode import parse_model_args
from amptool.ledger.url import LedgerError, ledger_url, shown
from amptool.parity import cli as parity_cli
from amptool.pipelineconfig import PipelineConfig
from amptool.runtime.device import own_process
from amptool.runtime.interrupts import stop_on_signals
from amptool.train import cli as train_cli
from amptool.train.cli import score_text
from amptool.train.config import TrainConfig

app = typer.Typer(cls=opt.AmpToolGroup, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False,
                  help="Mixed-precision training, FP16 export and parity gates for MindSpore.")


@app.command()
@opt.handle_errors
def info(as_json: opt.JsonOption = False) -> None:
    """Show the MindSpore version, usable devices and which export formats work here."""
    facts = host_info()
    if as_json:
        formats = {fmt: {"available": ok, "reason": why}
                   for fmt, (ok, why) in facts["formats"].items()}
        opt.print_json({**facts, "formats": formats})
        return
    typer.echo(f"amptool {facts['amptool']}  MindSpore {facts['mindspore']}  "
               f"Python {facts['python']}")
    typer.echo(f"devices usable here: {', '.join(facts['devices'])}")
    for fmt, (ok, why) in facts["formats"].items():
        typer.echo(f"export {fmt:<7} {'yes' if ok else 'no '}  {why}")


def pipeline_command(
    model: opt.defaulted(opt.ModelOption, TrainConfig, "model") = None,
    model_arg: opt.ModelArgOption = None,
    input_spec: opt.InputSpecOption = None,
    data: opt.defaulted(opt.DataOption, TrainConfig, "data") = None,
    loss: opt.defaulted(opt.LossOption, TrainConfig, "loss") = None,
    metric: opt.defaulted(opt.TrainMetricOption, TrainConfig, "metric") = None,
    amp_level: opt.defaulted(opt.AmpLevelOption, TrainConfig, "amp_level") = None,
    policy: opt.PolicyFileOption = None,
    range_safety: opt.defaulted(opt.RangeSafetyOption, TrainConfig, "range_safety") = None,
    epochs: opt.defaulted(opt.EpochsOption, TrainConfig, "epochs") = None,
    batch_size: opt.defaulted(opt.BatchSizeOption, TrainConfig, "batch_size") = None,
    seed: opt.defaulted(opt.SeedOption, TrainConfig, "seed") = None,
    device: opt.defaulted(opt.DeviceOption, TrainConfig, "device") = None,
    out: opt.defaulted(opt.OutOption, PipelineConfig, "out") = None,
    onnx: Optional[str] = typer.Option(None, help="Also export and check ONNX: auto, on or off. "
                                                  f"{opt.default_of(PipelineConfig, 'onnx')}"),
    samples: Optional[int] = typer.Option(None, help="Held-out samples in the parity check. "
                                          f"{opt.default_of(PipelineConfig, 'samples')}"),
    per_layer: bool = typer.Option(False, "--per-layer",
                                   help="Add per-layer localization of every artefact to "
                                        "the parity report."),
    localize: Optional[bool] = typer.Option(
        None, "--localize/--no-localize",
        help="Localize each artefact that fails parity by itself (per-layer, on its failing "
             f"samples). {opt.default_of(PipelineConfig, 'localize')}"),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the pipeline run --out "
                                                              "holds (refused without it)."),
    workers: opt.defaulted(opt.noted(opt.ShardWorkersOption, "Parity's samples only; "
                                     "training runs in one process."),
                           PipelineConfig, "workers") = None,
    config: opt.noted(opt.ConfigOption, "Training settings too, but for how train is "
                                        "launched and prints (the config reference lists the "
                                        "keys).") = None,
    report: opt.noted(opt.ReportOption, "Without it: report.html in --out.") = None,
    ledger: opt.LedgerOption = None,
    label: opt.LabelOption = None,
    baseline: BaselineOption = None,
    as_json: opt.JsonOption = False,
    quiet: opt.about(opt.QuietOption, "the summary table") = False,
) -> None:
    """Train, export MINDIR (+ ONNX) fp32 and fp16, check parity; exit 1 if parity fails (or,
    with --baseline, if the parity report regressed against it)."""
    flags = dict(model=model, model_args=parse_model_args(model_arg) or None,
                 input_spec=input_spec, data=data, loss=loss, metric=metric,
                 amp_level=amp_level.upper() if amp_level else None,
                 policy=_s(policy), range_safety=range_safety, epochs=epochs,
                 batch_size=batch_size, seed=seed,
                 device=device, out=_s(out), onnx=onnx.lower() if onnx else None,
                 samples=samples, per_layer=per_layer or None, localize=localize,
                 overwrite=overwrite or None, workers=workers, ledger=ledger, label=label,
                 baseline=baseline)
    cfg = PipelineConfig.from_file(config, **flags)
    html = opt.report_file(report, Path(cfg.out) / "report.html", Path(cfg.out))
    from amptool.pipeline import (diff_text, format_summary, measured_pipeline,
                                  raise_if_failed, write_html)

    result, refused = measured_pipeline(
        cfg, on_event=None if (quiet or as_json) else _stage_printer)
    if html is not None:
        write_html(html, result, cfg)
    if quiet or as_json:  # progress lines were off: still say what was skipped
        for message in result.warnings:
            _stage_printer(Warned(message))
    if as_json:
        opt.print_json(result.document())
    else:
        typer.echo(format_summary(result))
        if result.diff is not None:  # as amptool diff prints it (-q: its verdict line)
            typer.echo(diff_text(result.diff, table=False) if quiet
                       else "\n" + diff_text(result.diff))
        if cfg.ledger and not isinstance(refused, LedgerError):
            typer.echo(f"ledger: {len(result.summary.artefacts) - 1} record(s) appended to "
                       f"{shown(ledger_url(cfg.ledger))}")
    if refused is not None:  # a ledger's failure or a baseline of another model: exit 2
        raise refused
    raise_if_failed(result, cfg)


def _s(path) -> Optional[str]:
    return str(path) if path is not None else None


def _stage_printer(event: PipelineEvent) -> None:
    if isinstance(event, Stage):
        extra = f" ({', '.join(event.formats)})" if event.formats else ""
        typer.echo(f"== {event.stage}{extra}")
    elif isinstance(event, Warned):
        typer.echo(f"amptool: warning: {event.message}", err=True)
    elif isinstance(event, Overwrite):
        typer.echo(f"overwriting the run in {event.out}: {', '.join(event.replaced)} "
                   "replaced")
    elif isinstance(event, Epoch):
        if event.val_acc is not None:
            typer.echo(f"epoch {event.epoch}: loss {event.loss:.4f} "
                       f"val acc {event.val_acc:.4f}")
        else:
            typer.echo(f"epoch {event.epoch}: loss {event.loss:.4f} {score_text(event)}")


def _register_subcommands() -> None:
    for module in (train_cli, export_cli, parity_cli, convert_cli, gate_cli):
        module.register(app)
    app.command("run")(opt.handle_errors(pipeline_command))


_register_subcommands()


def main() -> None:
    """The ``amptool`` console script. SIGTERM stops a command like Ctrl+C: staged files
    are removed and it exits 130 with one line."""
    own_process()
    stop_on_signals()
    app()


if __name__ == "__main__":
    main()
