"""``amptool parity``: flags into a config, then ``parity.command.check`` (imported when the
command runs, so ``amptool --help`` stays light): the check, its files, the report."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from amptool.console import limitoptions as lim
from amptool.console import options as opt
from amptool.errors import UsageError
from amptool.network.usercode import parse_model_args
from amptool.parity.config import ParityConfig
from amptool.parity.plot import check_plot_available
from amptool.stats.limits import flag_overrides


def _default(name: str) -> str:
    """The ``\\[default: …]`` of a parity setting."""
    return opt.default_of(ParityConfig, name)


Artefacts = Annotated[List[str], typer.Argument(
    metavar="REFERENCE CANDIDATE...",
    help="Reference (artefact, checkpoint or run folder) then candidate artefacts; with "
         "--load-outputs, candidates only.")]
SamplesOption = Annotated[Optional[int], typer.Option(
    help=f"Use the first N held-out samples. {_default('samples')}")]
InputsOption = Annotated[Optional[Path], typer.Option(
    help="An .npz of ready inputs (arrays named after the inputs, or x; labels y), fed as "
         "they are.")]
SaveOutputsOption = Annotated[Optional[Path], typer.Option(
    "--save-outputs",
    help="Store the reference's outputs, inputs and labels (golden data) in this .npz.")]
LoadOutputsOption = Annotated[Optional[Path], typer.Option(
    "--load-outputs",
    help="Compare the candidates against golden outputs stored by --save-outputs.")]
PerLayerOption = Annotated[bool, typer.Option(
    "--per-layer",
    help="Localize the first diverging cell (eager fp32 vs the candidate's policy) and check "
         "stored weights.")]
LocalizeOption = Annotated[Optional[bool], typer.Option(
    "--localize/--no-localize",
    help="Localize each failing candidate by itself: the per-layer pass on its failing "
         "samples, the network rebuilt from the manifests (or --model); a passing one costs "
         f"nothing more. {_default('localize')}")]
LayerSamplesOption = Annotated[Optional[int], typer.Option(
    help=f"Samples in the per-layer pass. {_default('layer_samples')}")]
LayerMinCosineOption = Annotated[Optional[float], typer.Option(
    help=f"Per-cell cosine limit. {_default('layer_min_cosine')}")]
EmulateSettingsOption = Annotated[Optional[bool], typer.Option(
    "--emulate-settings/--no-emulate-settings",
    help="For each fp16 candidate that keeps cells in fp32, also run it eagerly with those "
         "cells in fp16 (a runtime ignoring its deployment settings) and report whether "
         f"the model depends on them; informational. {_default('emulate_settings')}")]
CkptOption = Annotated[Optional[Path], typer.Option(
    help="Checkpoint for --per-layer when an artefact's weights cannot be read (encrypted).")]
KeyFileOption = Annotated[Optional[Path], typer.Option(
    "--key-file", help="Decryption key of encrypted MindIR artefacts.")]
MetricOption = Annotated[Optional[str], typer.Option(
    help="Task metric path/file.py:fn; fn(outputs: list of arrays, labels or None) -> float, "
         "higher is better.")]
ConfigOption = Annotated[Optional[Path], typer.Option(
    help="YAML/TOML/JSON file of these options and a \\[thresholds] table; flags override it.")]
JsonOutOption = Annotated[Optional[Path], typer.Option(
    "--json-out", help="Write the full report as JSON to this file.")]
JunitOption = Annotated[Optional[Path], typer.Option(help="Write a JUnit XML report.")]
NodesOption = Annotated[Optional[int], typer.Option(
    help="Hosts taking part (msrun); --workers is per host; every host runs from one shared "
         f"folder. {_default('nodes')}")]
NodeRankOption = Annotated[Optional[int], typer.Option(
    help=f"This host's rank among --nodes (0 writes the report). {_default('node_rank')}")]
MasterAddrOption = Annotated[Optional[str], typer.Option(
    help=f"Address of the host of node rank 0 (msrun). {_default('master_addr')}")]
MasterPortOption = Annotated[Optional[int], typer.Option(
    help=f"msrun's port; 0 picks a free one (one host only). {_default('master_port')}")]
PlotOption = Annotated[Optional[Path], typer.Option(
    help="Write a per-layer error chart (PNG; needs matplotlib; implies --per-layer).")]


def parity_command(
    artefacts: Artefacts,
    data: opt.noted(opt.DataOption, f"Real samples (held-out split). {_default('data')}") = None,
    samples: SamplesOption = None,
    inputs: InputsOption = None,
    save_outputs: SaveOutputsOption = None,
    load_outputs: LoadOutputsOption = None,
    per_layer: PerLayerOption = False,
    localize: LocalizeOption = None,
    layer_samples: LayerSamplesOption = None,
    layer_min_cosine: LayerMinCosineOption = None,
    emulate_settings: EmulateSettingsOption = None,
    model: opt.noted(opt.ModelOption, "For --per-layer when no manifest names one.") = None,
    model_arg: opt.ModelArgOption = None,
    input_spec: opt.InputSpecOption = None,
    trust_model: opt.TrustModelOption = None,
    ckpt: CkptOption = None,
    key_file: KeyFileOption = None,
    max_abs_scaled: lim.MaxAbsScaledOption = None,
    metric: MetricOption = None,
    max_metric_drop: lim.MaxMetricDropOption = None,
    atol: lim.AtolOption = None,
    rtol: lim.RtolOption = None,
    allow_nonfinite: lim.AllowNonfiniteOption = False,
    config: ConfigOption = None,
    json_out: JsonOutOption = None,
    junit: JunitOption = None,
    report: opt.noted(opt.ReportOption, "Without it: beside --json-out, named after it with "
                                        ".html (no report without --json-out).") = None,
    plot: PlotOption = None,
    device: opt.defaulted(opt.DeviceOption, ParityConfig, "device") = None,
    workers: opt.defaulted(opt.ShardWorkersOption, ParityConfig, "workers") = None,
    nodes: NodesOption = None,
    node_rank: NodeRankOption = None,
    master_addr: MasterAddrOption = None,
    master_port: MasterPortOption = None,
    ledger: opt.LedgerOption = None,
    label: opt.LabelOption = None,
    quiet: opt.about(opt.QuietOption, "the verdict line") = False,
    as_json: opt.about(opt.JsonOption, "the full report (as --json-out writes it)") = False,
    limits: Optional[dict] = None,
) -> None:
    """Compare FP16/ONNX artefacts with a reference on real inputs; exit 1 on any breach."""
    check_outputs(artefacts, as_json, {"--json-out": json_out, "--junit": junit, "--plot": plot,
                                       "--save-outputs": save_outputs})
    html = opt.report_file(report, beside(json_out))
    thresholds = flag_overrides(**(limits or {}), max_abs_scaled=max_abs_scaled,
                                max_metric_drop=max_metric_drop,
                                atol=atol, rtol=rtol, allow_nonfinite=allow_nonfinite)
    flags = dict(data=data, samples=samples, inputs=_s(inputs), save_outputs=_s(save_outputs),
                 load_outputs=_s(load_outputs), per_layer=(per_layer or plot is not None) or None,
                 localize=localize, layer_samples=layer_samples,
                 layer_min_cosine=layer_min_cosine, model=model,
                 model_args=parse_model_args(model_arg) or None, input_spec=input_spec,
                 ckpt=_s(ckpt), metric=metric, device=device, emulate_settings=emulate_settings,
                 workers=workers, nodes=nodes, node_rank=node_rank, master_addr=master_addr,
                 master_port=master_port, ledger=ledger, label=label)
    cfg = ParityConfig.from_file(config, artefacts, key_file=key_file, thresholds=thresholds,
                                 **flags)
    if save_outputs is None and cfg.save_outputs:
        opt.check_output_path(Path(cfg.save_outputs), f"save_outputs (config {config})")
    opt.consent(trust_model)
    from amptool.parity.command import check

    check(cfg, json_out, junit, plot, "json" if as_json else "quiet" if quiet else "", html)


def check_outputs(artefacts: List[str], as_json: bool, outputs: dict) -> None:
    """Refuse unwritable output paths (flag -> path), and --plot without matplotlib, before
    any work."""
    stray = next((a for a in artefacts if a.lower().endswith(".json")), None)
    if as_json and stray:
        raise UsageError(f"{stray} is not an artefact (--json prints the report and takes no "
                         "file)", f"write the report to a file with --json-out {stray}")
    for flag, path in outputs.items():
        opt.check_output_path(path, flag)
    if outputs.get("--plot") is not None:
        check_plot_available()


def _s(path) -> Optional[str]:
    return str(path) if path is not None else None


def beside(json_out: Optional[Path]) -> Optional[Path]:
    """Where the HTML report goes by default: beside ``json_out``, named after it with .html
    (None without it)."""
    if json_out is None:
        return None
    html = Path(json_out).with_suffix(".html")
    return html if html != Path(json_out) else Path(f"{json_out}.html")


def register(app: typer.Typer) -> None:
    app.command("parity")(opt.handle_errors(lim.with_limits(parity_command)))
