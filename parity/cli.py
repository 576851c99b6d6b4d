"""``amptool parity`` and ``amptool run``: flags into a config, one library call, a report."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from amptool.cli import handle_errors

LIMIT = "a number, or 'off' to disable"


def parity_command(
    artefacts: List[str] = typer.Argument(..., metavar="REFERENCE CANDIDATE...", help="Reference (artefact, checkpoint or run folder) then candidate artefacts; with --load-outputs, candidates only."),
    data: Optional[str] = typer.Option(None, help="Real samples: digits, synthetic, mnist:DIR, imagefolder:DIR or npz:FILE (held-out split). \\[default: the manifest's data, else digits]"),
    samples: Optional[int] = typer.Option(None, help="Use the first N held-out samples. \\[default: all]"),
    inputs: Optional[Path] = typer.Option(None, help="An .npz of ready inputs (arrays named after the inputs, or x; labels y), fed as they are."),
    save_outputs: Optional[Path] = typer.Option(None, "--save-outputs", help="Store the reference's outputs, inputs and labels (golden data) in this .npz."),
    load_outputs: Optional[Path] = typer.Option(None, "--load-outputs", help="Compare the candidates against golden outputs stored by --save-outputs."),
    per_layer: bool = typer.Option(False, "--per-layer", help="Localize the first diverging cell (eager fp32 vs the candidate's policy) and check stored weights."),
    layer_samples: Optional[int] = typer.Option(None, help="Samples in the per-layer pass. \\[default: 32]"),
    layer_min_cosine: Optional[float] = typer.Option(None, help="Per-cell cosine limit. \\[default: the candidate's --min-cosine]"),
    model: Optional[str] = typer.Option(None, help="Model for --per-layer when no manifest names one (name or file.py:factory)."),
    ckpt: Optional[Path] = typer.Option(None, help="Checkpoint for --per-layer when an artefact's weights cannot be read (encrypted)."),
    key_file: Optional[Path] = typer.Option(None, "--key-file", help="Decryption key of encrypted MindIR artefacts."),
    min_cosine: Optional[str] = typer.Option(None, help=f"Least cosine similarity ({LIMIT}). \\[default: 0.999 fp16, 0.99999 fp32]"),
    min_top1: Optional[str] = typer.Option(None, help=f"Least top-1 agreement ({LIMIT}). \\[default: 0.99 fp16, 1.0 fp32]"),
    max_acc_drop: Optional[str] = typer.Option(None, help=f"Largest accuracy drop as a fraction ({LIMIT}). \\[default: 0.005 fp16, 0 fp32]"),
    max_abs: Optional[str] = typer.Option(None, help=f"Largest absolute error ({LIMIT}). \\[default: off fp16, 1e-4 fp32]"),
    max_rel: Optional[str] = typer.Option(None, help=f"Largest relative error ({LIMIT}). \\[default: off]"),
    max_outside: Optional[str] = typer.Option(None, help=f"Largest fraction of elements outside atol + rtol*|ref| ({LIMIT}). \\[default: off]"),
    atol: Optional[str] = typer.Option(None, help="Absolute tolerance of --max-outside. \\[default: 1e-3]"),
    rtol: Optional[str] = typer.Option(None, help="Relative tolerance of --max-outside. \\[default: 1e-2]"),
    allow_nonfinite: bool = typer.Option(False, "--allow-nonfinite", help="Tolerate NaN/Inf in a candidate."),
    config: Optional[Path] = typer.Option(None, help="YAML/TOML/JSON file of these options and a \\[thresholds] table; flags override it."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the full report as JSON."),
    junit: Optional[Path] = typer.Option(None, help="Write a JUnit XML report."),
    plot: Optional[Path] = typer.Option(None, help="Write a per-layer error chart (PNG; needs matplotlib; implies --per-layer)."),
    device: Optional[str] = typer.Option(None, help="auto, CPU, GPU or Ascend. \\[default: auto]"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the verdict."),
) -> None:
    """Compare FP16/ONNX artefacts with a reference on real inputs; exit 1 on any breach."""
    from amptool.parity.config import flag_overrides

    thresholds = flag_overrides(min_cosine=min_cosine, min_top1=min_top1, max_acc_drop=max_acc_drop,
                                max_abs=max_abs, max_rel=max_rel, max_outside=max_outside,
                                atol=atol, rtol=rtol, allow_nonfinite=allow_nonfinite)
    flags = dict(data=data, samples=samples, inputs=_s(inputs), save_outputs=_s(save_outputs),
                 load_outputs=_s(load_outputs), per_layer=(per_layer or plot is not None) or None,
                 layer_samples=layer_samples, layer_min_cosine=layer_min_cosine, model=model,
                 ckpt=_s(ckpt), device=device)
    cfg = build_parity_config(artefacts, flags, thresholds, config, key_file)
    if plot is not None:
        from amptool.parity.plot import check_plot_available

        check_plot_available()
    from amptool.parity.compare import check_parity

    report = check_parity(cfg)
    emit_report(report, json_out, junit, plot, quiet)


def _s(path) -> Optional[str]:
    return str(path) if path is not None else None


def build_parity_config(artefacts, flags: dict, thresholds: dict, config, key_file):
    from amptool.config import build_config, read_config_file
    from amptool.errors import UsageError
    from amptool.parity.config import ParityConfig, validate_file_thresholds

    file_values = dict(read_config_file(config)) if config else {}
    source = f"config {config}"
    file_th = validate_file_thresholds(file_values.pop("thresholds", {}), source)
    for bad in ("reference", "candidates", "thresholds", "file_thresholds", "key"):
        if bad in file_values:
            raise UsageError(f"{source}: '{bad}' cannot be set in a config file",
                             "give artefacts on the command line")
    key = None
    if key_file is not None:
        from amptool.export.keys import key_from_file

        key = key_from_file(key_file)
    load = flags.get("load_outputs") or file_values.get("load_outputs")
    ref, cands = ("", tuple(artefacts)) if load else (artefacts[0], tuple(artefacts[1:]))
    base = {**file_values}
    overrides = {**flags, "reference": ref, "candidates": cands, "key": key,
                 "thresholds": thresholds, "file_thresholds": file_th}
    return build_config(ParityConfig, base, overrides, source=source)


def emit_report(report: dict, json_out, junit, plot, quiet: bool) -> None:
    """Print the table, write the requested files, then exit 1 if parity failed."""
    from amptool.errors import CheckFailed
    from amptool.parity.report import (failure_fix, failure_line, format_table, write_junit,
                                       write_report_json)

    if json_out is not None:
        write_report_json(str(json_out), report)
    if junit is not None:
        write_junit(str(junit), report)
    if plot is not None:
        from amptool.parity.plot import write_plot

        write_plot(str(plot), report)
    text = format_table(report)
    typer.echo(text.splitlines()[-1] if quiet else text)
    if not report["passed"]:
        raise CheckFailed(failure_line(report), failure_fix(report))


def run_command(
    model: Optional[str] = typer.Option(None, help="Sample name or path/to/file.py:factory. \\[default: simplecnn]"),
    data: Optional[str] = typer.Option(None, help="digits, synthetic, mnist:DIR, imagefolder:DIR or npz:FILE. \\[default: digits]"),
    amp_level: Optional[str] = typer.Option(None, "--amp-level", help="AMP level of training, O0..O3. \\[default: O2]"),
    policy: Optional[Path] = typer.Option(None, help="Precision policy file (overrides --amp-level)."),
    epochs: Optional[int] = typer.Option(None, help="Training epochs. \\[default: 5]"),
    batch_size: Optional[int] = typer.Option(None, help="Training batch size. \\[default: 32]"),
    seed: Optional[int] = typer.Option(None, help="Seed for weights and data order. \\[default: 0]"),
    device: Optional[str] = typer.Option(None, help="auto, CPU, GPU or Ascend. \\[default: auto]"),
    out: Optional[Path] = typer.Option(None, help="Output folder. \\[default: runs/pipeline]"),
    onnx: Optional[str] = typer.Option(None, help="Also export and check ONNX: auto, on or off. \\[default: auto]"),
    samples: Optional[int] = typer.Option(None, help="Held-out samples in the parity check. \\[default: all]"),
    per_layer: bool = typer.Option(False, "--per-layer", help="Add per-layer localization to the parity report."),
    config: Optional[Path] = typer.Option(None, help="YAML/TOML/JSON file of these options; flags override it."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the summary table."),
) -> None:
    """Train, export MINDIR (+ ONNX) fp32 and fp16, check parity; exit 1 if parity fails."""
    import json

    from amptool.config import build_config, read_config_file
    from amptool.errors import CheckFailed
    from amptool.parity.pipeline import PipelineConfig, run_pipeline

    flags = dict(model=model, data=data, amp_level=amp_level.upper() if amp_level else None,
                 policy=_s(policy), epochs=epochs, batch_size=batch_size, seed=seed,
                 device=device, out=_s(out), onnx=onnx.lower() if onnx else None,
                 samples=samples, per_layer=per_layer or None)
    file_values = read_config_file(config) if config else {}
    cfg = build_config(PipelineConfig, file_values, flags, source=f"config {config}")
    summary = run_pipeline(cfg, on_event=None if (quiet or as_json) else _stage_printer)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True, default=str))
    else:
        from amptool.parity.report import format_pipeline

        typer.echo(format_pipeline(summary))
    if not summary["passed"]:
        culprits = summary["parity"]["culprits"]
        why = "; ".join(f"{Path(c['artefact']).name}: {c['message']}" for c in culprits)
        fix = next((c["fix"] for c in culprits if c.get("fix")), "")
        raise CheckFailed(f"parity failed{' for ' + why if why else ''}",
                          (fix + "; " if fix else "") + f"see {Path(cfg.out) / 'parity.json'}")


def _stage_printer(event: dict) -> None:
    if event["kind"] == "stage":
        extra = f" ({', '.join(event['formats'])})" if event.get("formats") else ""
        typer.echo(f"== {event['stage']}{extra}")
    elif event["kind"] == "epoch":
        typer.echo(f"epoch {event['epoch']}: loss {event['loss']:.4f} val acc {event['val_acc']:.4f}")


def register(app: typer.Typer) -> None:
    app.command("parity")(handle_errors(parity_command))
    app.command("run")(handle_errors(run_command))
