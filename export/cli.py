"""``amptool export`` and ``amptool inspect``: options into a config, one library call, print.

Imports the config and what prints the result; the library is imported when the command
runs, so ``amptool --help`` stays light.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from amptool.artefact.keys import ENV_VAR, key_from_env, resolve_key
from amptool.console import options as opt
from amptool.errors import CheckFailed
from amptool.export.config import ExportConfig, validate
from amptool.export.deploy import summary_line
from amptool.network.usercode import parse_model_args

if TYPE_CHECKING:
    from amptool.export.api import ExportReport


def _value(name: str):
    return opt.value_of(ExportConfig, name)


def export_command(
    run: Optional[Path] = typer.Option(None, help="Training run folder: model, policy, "
                                                  "preprocessing from run.json, weights from its "
                                                  "best checkpoint."),
    ckpt: Optional[Path] = typer.Option(None, help="Checkpoint file (.ckpt or .safetensors) "
                                                   "instead of --run; needs --model."),
    model: opt.noted(opt.ModelOption, "Needed with --ckpt; with --run, replaces the run's "
                                      "model.") = None,
    model_arg: opt.ModelArgOption = None,
    input_spec: opt.InputSpecOption = None,
    trust_model: opt.TrustModelOption = None,
    which: str = typer.Option(_value("which"), help="With --run: the best or last checkpoint."),
    fmt: List[str] = typer.Option(list(_value("formats")), "--format", "-f",
                                  help="MINDIR, AIR or ONNX (case-insensitive); repeat or "
                                       "comma-separate for several."),
    precision: str = typer.Option(_value("precision"), help="fp32, fp16 or both."),
    batch_size: int = typer.Option(_value("batch_size"),
                                   help="Fixed batch dimension of the exported graph."),
    dynamic_batch: bool = typer.Option(False, "--dynamic-batch",
                                       help="Export a dynamic batch dimension instead of "
                                            "--batch-size."),
    io_dtype: str = typer.Option(_value("io_dtype"), help="Input/output dtype of the fp16 "
                                                          "artefact: fp32 (drop-in for the fp32 "
                                                          "one) or fp16."),
    out: opt.defaulted(opt.OutOption, ExportConfig, "out") = None,
    force: bool = typer.Option(False, "--force", help="Replace existing artefacts."),
    no_audit: bool = typer.Option(False, "--no-audit",
                                  help="Write the artefacts even when a graph's precision "
                                       "contradicts its policy (amptool inspect lists the "
                                       "findings)."),
    policy: Optional[Path] = typer.Option(None, help="Precision policy file (TOML/YAML/JSON) for "
                                                     "the fp16 graph; overrides the run's."),
    amp_level: opt.noted(opt.AmpLevelOption, "For the fp16 graph (overrides the run's policy); "
                                             "O0/O1 export as O2.") = None,
    data: opt.noted(opt.DataOption, "With --ckpt: the training data, to record its preprocessing "
                                    "in the manifest ('none' to skip).") = _value("data"),
    val_fraction: float = typer.Option(_value("val_fraction"), help="With --ckpt: the validation "
                                                                    "fraction used in training."),
    device: opt.noted(opt.DeviceOption, "AIR needs Ascend.") = _value("device"),
    encrypt_key_file: Optional[Path] = typer.Option(None,
                                                    help="Encrypt MINDIR with the AES-GCM key in "
                                                         "this file (hex or raw 16/24/32 bytes)."),
    encrypt_key_env: Optional[str] = typer.Option(None, help="Encrypt MINDIR with the key (hex) in "
                                                             "this environment variable."),
    as_json: opt.about(opt.JsonOption, "the written artefacts with their manifests") = False,
) -> None:
    """Export a trained network to MINDIR/AIR/ONNX in fp32 and true fp16, with manifests."""
    cfg = ExportConfig(
        run=str(run) if run else None, ckpt=str(ckpt) if ckpt else None, model=model,
        model_args=parse_model_args(model_arg) or None, input_spec=input_spec,
        which=which, formats=tuple(fmt), precision=precision, batch_size=batch_size,
        dynamic_batch=dynamic_batch, io_dtype=io_dtype.lower(), out=str(out) if out else None,
        force=force, audit=not no_audit, policy=str(policy) if policy else None,
        amp_level=amp_level.upper() if amp_level else None,
        data=data, val_fraction=val_fraction, device=device)
    validate(cfg)
    key = resolve_key(str(encrypt_key_file) if encrypt_key_file else None, encrypt_key_env)
    if key is not None:
        cfg = dataclasses.replace(cfg, encrypt_key=key)
    opt.consent(trust_model)
    from amptool.export.api import export

    _print_report(export(cfg), as_json)


def _print_report(report: ExportReport, as_json: bool) -> None:
    """The written artefacts: as JSON, or a line each (size, its ratio to the fp32 one,
    parameter dtypes) and the deployment settings it needs."""
    if as_json:
        opt.print_json([r.to_dict() for r in report])
        return
    sizes = {(r.format, r.precision): r.manifest.total_size or 0 for r in report}
    for r in report:
        m = r.manifest
        total = m.total_size or 0
        ratio = ""
        if r.precision == "fp16" and (r.format, "fp32") in sizes:
            ratio = f", {total / sizes[(r.format, 'fp32')]:.3f}x of fp32"
        dtypes = ", ".join(f"{k} {v:,}" for k, v in m.params.dtypes.items()) or "n/a"
        apart = len(m.files or []) - 1
        beside = f" in {apart + 1} files (weights beside the graph)" if apart > 0 else ""
        typer.echo(f"wrote {r.path} ({total:,} bytes{beside}{ratio}; params {dtypes}"
                   f"{'; encrypted' if m.encrypted else ''}) + manifest")
        if m.deployment is not None and m.deployment.needed:
            typer.echo(f"  {summary_line(m.deployment)}")
        findings = r.audit.findings if r.audit is not None else []
        if findings:  # notes only: an error stops the export
            typer.echo(f"  precision audit: {len(findings)} note(s), the first: "
                       f"{findings[0].text} (amptool inspect lists them)")


def inspect_command(
    path: Path = typer.Argument(..., help="A .mindir or .onnx file."),
    key_file: Optional[Path] = typer.Option(None, help="Key file of an encrypted MINDIR."),
    key_env: Optional[str] = typer.Option(None, help="Environment variable holding the key (hex) "
                                                     "of an encrypted MINDIR. "
                                                     f"{opt.shown(f'{ENV_VAR} when set')}"),
    as_json: opt.about(opt.JsonOption, "the facts") = False,
) -> None:
    """Show format, inputs, outputs, parameters, size and sha256 of an artefact, the
    provenance inside it, its precision audit (and its manifest)."""
    from amptool.export.inspect import format_report, inspect_artefact, settings_broken

    key = resolve_key(str(key_file) if key_file else None, key_env)
    if key is None:
        key = key_from_env(ENV_VAR, required=False)
    facts = inspect_artefact(path, key)
    if as_json:
        opt.print_json(facts)
    else:
        for line in format_report(facts):
            typer.echo(line)
    if facts["manifest_matches"] is False:
        raise CheckFailed(f"the manifest beside {path} does not match the file",
                          "export the artefact again")
    audit = facts.get("audit") or {}
    if audit.get("errors"):
        first = next(f for f in audit["findings"] if f["severity"] == "error")
        raise CheckFailed(f"{path}: its graph contradicts its policy: {first['text']}"
                          + (f" (and {audit['errors'] - 1} more)" if audit["errors"] > 1 else ""),
                          "export the artefact again")
    broken = settings_broken(facts.get("deployment"))
    if broken:
        raise CheckFailed(f"the deployment settings beside {path} are missing or changed "
                          f"({', '.join(broken)}): a runtime without them may compute the "
                          "kept fp32 cells in fp16", "export the artefact again")


def register(app: typer.Typer) -> None:
    app.command("export")(opt.handle_errors(export_command))
    app.command("inspect")(opt.handle_errors(inspect_command))
