"""``amptool convert policy|ckpt|search``: thin commands over convert's library functions.

Imports the configs; each command imports its library function when it runs, so
``amptool --help`` stays light.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple, cast

import typer

from amptool.console import limitoptions as lim
from amptool.console import options as opt
from amptool.convert.config import CkptConfig, PolicyConfig, SearchConfig, validate
from amptool.convert.result import SEARCH, SearchEvent, SearchStart, TrialMetrics, TrialRun
from amptool.files.configfile import read_config_file
from amptool.network.usercode import parse_model_args
from amptool.precision.safety import check_range_safety, why_kept
from amptool.stats.limits import default_text as limit_default
from amptool.stats.limits import flag_overrides, validate_file_thresholds

convert_app = typer.Typer(cls=opt.AmpToolGroup, no_args_is_help=True, add_completion=False,
                          help="Precision policies, checkpoint dtype conversion, fp32-cell search.")


def policy_command(
    level: Optional[str] = typer.Option(None, help="Built-in level O0, O1, O2 or O3. "
                                                   f"{opt.default_of(PolicyConfig, 'level')}"),
    dtype: Optional[str] = typer.Option(None, help="Low dtype: fp16 or bf16 (bf16 not on CPU). "
                                                   f"{opt.default_of(PolicyConfig, 'dtype')}"),
    policy: Optional[Path] = typer.Option(None, help="Read this policy file (TOML/YAML/JSON, or a "
                                                     "run.json/manifest)."),
    fp32_type: List[str] = typer.Option([], "--fp32-type",
                                        help="Cell type kept in fp32 (repeatable), e.g. Softmax."),
    fp32_cell: List[str] = typer.Option([], "--fp32-cell",
                                        help="Cell path kept in fp32 (repeatable), e.g. "
                                             "blocks.1.attn.softmax."),
    fp16_cell: List[str] = typer.Option([], "--fp16-cell",
                                        help="Cell path forced to the low dtype (repeatable)."),
    model: opt.noted(opt.ModelOption, "Shows each cell's dtype.") = None,
    model_arg: opt.ModelArgOption = None,
    input_spec: opt.InputSpecOption = None,
    device: opt.noted(opt.DeviceOption, "Check the dtype runs on this device.") = None,
    out: opt.PolicyOutOption = None,
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    as_json: opt.about(opt.JsonOption, "the policy, its meaning and per-cell rows") = False,
) -> None:
    """Show what a level or policy file means (per cell with --model); write it as a policy file."""
    cfg = PolicyConfig(level=level, dtype=dtype, policy=str(policy) if policy else None,
                       fp32_types=tuple(fp32_type), fp32_cells=tuple(fp32_cell),
                       fp16_cells=tuple(fp16_cell), model=model,
                       model_args=parse_model_args(model_arg) or None, input_spec=input_spec,
                       device=device,
                       out=str(out) if out else None, force=force)
    from amptool.convert.explain import explain_policy

    report = explain_policy(cfg)
    if as_json:
        opt.print_json(report.to_dict())
        return
    typer.echo(f"policy {report.policy.describe()}: {report.meaning}")
    if report.rows:
        width = max(len(r[0]) for r in report.rows)
        typer.echo(f"{'cell':<{width}}  {'type':<16} {'dtype':<8} params")
        for path, kind, dt, nparams in report.rows:
            typer.echo(f"{path:<{width}}  {kind:<16} {dt:<8} {nparams}")
        counts = report.counts()
        total = sum(p for _, p in counts.values()) or 1
        typer.echo("; ".join(f"{dt}: {c} cells, {p / total:.1%} of leaf-cell parameters"
                             for dt, (c, p) in sorted(counts.items())))
        for path, where in report.kept_where.items():
            typer.echo(f"fp32 cell {path}: {where}")
    else:
        typer.echo(report.policy.to_toml().rstrip())
    if report.out:
        typer.echo(f"wrote {report.out}")


def ckpt_command(
    src: Path = typer.Argument(..., help="Checkpoint to convert (ckpt or safetensors)."),
    dst: Path = typer.Argument(..., help="File to write."),
    to: str = typer.Option(..., "--to", help="Target dtype of float entries: fp16 or fp32."),
    fmt: Optional[str] = typer.Option(None, "--format",
                                      help="ckpt or safetensors. "
                                           f"{opt.default_of(CkptConfig, 'format')}"),
    policy: Optional[Path] = typer.Option(None, help="Keep this policy's fp32 cells in fp32 (needs "
                                                     "the model). "
                                                     f"{opt.default_of(CkptConfig, 'policy')}"),
    all_floats: bool = typer.Option(False, "--all",
                                    help="Convert every float entry, ignoring the policy."),
    model: opt.defaulted(opt.ModelOption, CkptConfig, "model") = None,
    model_arg: opt.ModelArgOption = None,
    input_spec: opt.InputSpecOption = None,
    trust_model: opt.TrustModelOption = None,
    weights_only: bool = typer.Option(False, "--weights-only",
                                      help="Keep only the network's parameters (drop "
                                           "optimizer/loss-scale state and counters; needs the "
                                           "model)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT if it exists."),
    as_json: opt.about(opt.JsonOption, "the conversion report") = False,
) -> None:
    """Convert a checkpoint's float parameters to fp16 or fp32; other entries are copied as
    they are."""
    cfg = CkptConfig(src=str(src), dst=str(dst), to=to.lower(), format=fmt,
                     policy=str(policy) if policy else None, model=model,
                     model_args=parse_model_args(model_arg) or None, input_spec=input_spec,
                     all_floats=all_floats,
                     weights_only=weights_only, force=force)
    validate(cfg)  # every mistake before the consent is recorded
    opt.consent(trust_model)
    from amptool.convert.ckpt import convert_checkpoint

    report = convert_checkpoint(cfg)
    if as_json:
        opt.print_json(report.to_dict())
        return
    typer.echo(f"policy: {report.policy}")
    typer.echo(f"converted {len(report.converted)} float entries to {report.to}; kept fp32: "
               f"{len(report.kept_policy)} by policy, {len(report.kept_range)} beyond fp16 range; "
               f"{len(report.untouched)} non-float entries untouched")
    if report.kept_range:
        typer.echo("beyond fp16 range (kept fp32): " + _names(report.kept_range))
    if report.underflow:
        typer.echo(f"{report.underflow} nonzero values flushed to zero in fp16, in "
                   f"{len(report.underflow_entries)} entries: {_names(report.underflow_entries)}")
    if report.dropped:
        typer.echo(f"dropped {len(report.dropped)} entries (" + (
            "--weights-only" if cfg.weights_only else "safetensors holds tensors only") + "): "
            + _names(report.dropped))
    typer.echo(f"size {_size(report.bytes_before)} -> {_size(report.bytes_after)} "
               f"({report.ratio:.2f}x) | wrote {report.dst} ({report.format})")


def _names(names: list) -> str:
    return ", ".join(names[:6]) + (f" +{len(names) - 6} more" if len(names) > 6 else "")


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _search(name: str):
    return opt.value_of(SearchConfig, name)


def search_command(
    run: Optional[Path] = typer.Option(None, help="Training run folder (run.json and best "
                                                  "checkpoint)."),
    ckpt: Optional[Path] = typer.Option(None, help="Checkpoint to search on (with --model, or "
                                                   "overriding the run's)."),
    model: opt.defaulted(opt.ModelOption, SearchConfig, "model") = None,
    model_arg: opt.ModelArgOption = None,
    input_spec: opt.InputSpecOption = None,
    trust_model: opt.TrustModelOption = None,
    data: opt.noted(opt.DataOption, "Its held-out split feeds the trials. "
                                    f"{opt.default_of(SearchConfig, 'data')}") = None,
    samples: Optional[int] = typer.Option(_search("samples"), help="Held-out samples per trial "
                                                                   "(0: the whole split)."),
    level: str = typer.Option(_search("level"), help="Base level: O3 (all fp16) or O2 "
                                                     "(BatchNorm/LayerNorm fp32)."),
    policy: Optional[Path] = typer.Option(None, help="Base policy file (instead of --level); its "
                                                     "fp32 cells stay fp32."),
    out: opt.PolicyOutOption = Path(_search("out")),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    thresholds: Optional[Path] = typer.Option(None, help="YAML/TOML/JSON thresholds (a parity "
                                                         "config's thresholds table works) over "
                                                         "parity's fp16 defaults."),
    device: opt.DeviceOption = _search("device"),
    range_safety: str = typer.Option(str(_search("range_safety")),
                                     help="Range pass before any trial: cells (blocks "
                                     "too) whose fp32 outputs or inputs reach this share of "
                                     "65504, are mostly fp16-subnormal or break computing alone "
                                     "in fp16 stay fp32; 'off' skips it."),
    plot: Optional[Path] = typer.Option(None, help="Write the range pass's chart: each cell's "
                                        "fp32 magnitudes against fp16's range (PNG; needs "
                                        "matplotlib)."),
    max_abs_scaled: Optional[str] = typer.Option(None, "--max-abs-scaled", help="Largest "
                                                 "max|c - r| / max(1, max|ref|) (a number or "
                                                 "'off'). " + opt.shown(
                                                     limit_default("max_abs_scaled", True))),
    metric: Optional[str] = typer.Option(None, help="Task metric path/file.py:fn (fn(outputs, "
                                                    "targets) -> float, higher is better) each "
                                                    "trial is held to as well."),
    max_metric_drop: Optional[str] = typer.Option(None, "--max-metric-drop", help="Largest "
                                                  "drop of --metric from the fp32 reference's "
                                                  "value (a number or 'off'). "
                                                  f"{opt.shown(limit_default('max_metric_drop'))}"),
    quiet: opt.QuietOption = False,
    as_json: opt.about(opt.JsonOption, "the result with the whole trace") = False,
    limits: Optional[dict] = None,
) -> None:
    """Find the cells that must stay fp32 for the fp16 network to pass parity; write a policy."""
    table, flags = _limits(thresholds, dict(limits or {}, max_abs_scaled=max_abs_scaled,
                                            max_metric_drop=max_metric_drop))
    cfg = SearchConfig(run=str(run) if run else None, ckpt=str(ckpt) if ckpt else None,
                       model=model, model_args=parse_model_args(model_arg) or None,
                       input_spec=input_spec, data=data, samples=samples or None,
                       level=level.upper(),
                       policy=str(policy) if policy else None, threshold_table=table,
                       threshold_flags=flags, metric=metric, out=str(out),
                       # typer gives the field's default ('auto') when --device is not given
                       force=force, device=device,  # type: ignore[arg-type]
                       range_safety=_range_safety(range_safety),
                       plot=str(plot) if plot else None)
    validate(cfg)  # every mistake before the consent is recorded
    opt.consent(trust_model)
    from amptool.convert.search import search_policy

    result = search_policy(cfg, on_event=None if (quiet or as_json) else _print_event)
    if as_json:
        opt.print_json(SEARCH.json(result))
        return
    where = result.kept_where
    kept = ", ".join(f"{k} [{where[k]}]" if k in where else k for k in result.kept) \
        if result.kept else "none"
    typer.echo(f"kept in fp32 (beyond the base): {kept}")
    typer.echo(f"policy {result.policy.describe()}")
    typer.echo(f"fp16 share: {result.params_fp16:.1%} of parameters, "
               f"{result.flops_fp16:.1%} of FLOPs"
               f" | confirmed on a fresh network: cosine {result.confirm.metrics.cosine:.6f}")
    typer.echo(f"{result.n_trials} trials (brute force: {len(result.candidates)}) in "
               f"{result.seconds:.1f} s | wrote {result.out}")


def _range_safety(text: str) -> Optional[float]:
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    check_range_safety(value, "--range-safety", "e.g. --range-safety 0.5", True, text)
    return value


def _limits(path: Optional[Path], flags: dict) -> Tuple[dict, dict]:
    """(table, flags) over parity's fp16-vs-fp32 limits for the output the search judges,
    the network's first (a file's general, ``fp16_vs_fp32`` and ``outputs.0`` tables, then
    flags), checked now; the search lays them over the limits its network's task takes.
    The file is read as parity reads it (a parity config's ``thresholds`` table works whole)."""
    table: dict = {}
    if path:
        data = read_config_file(path)
        table = data["thresholds"] if isinstance(data.get("thresholds"), dict) else data
        validate_file_thresholds(table, f"thresholds file {path}")
    return table, flag_overrides(**flags)


def _fmt_metric(metrics: TrialMetrics) -> str:
    parts = [f"cosine {metrics.cosine:.6f}"]
    scaled = metrics.top1_agree is None  # no class logits: judged by the scaled error
    for key in ("top1_agree", "acc_drop", "max_abs", "max_abs_scaled", "p999_abs_scaled",
                "task_drop"):
        value = getattr(metrics, key)
        if value is not None and (not key.endswith("_scaled") or scaled):
            parts.append(f"{key} {value:.4g}")
    if metrics.nonfinite:
        parts.append(f"nonfinite {metrics.nonfinite}")
    if metrics.failed:  # several outputs: which of them breached what
        parts.append(f"failed {', '.join(metrics.failed)}")
    return " ".join(parts)


def _print_event(event: SearchEvent) -> None:
    if isinstance(event, SearchStart):
        base = f" (base keeps {', '.join(event.base_kept)})" if event.base_kept else ""
        typer.echo(f"search on {event.model} ({event.ckpt}), base {event.base}{base}, "
                   f"{len(event.candidates)} candidate cells, {event.samples} samples, "
                   f"{event.device}")
        for r in event.ranged:
            typer.echo(f"range pass keeps {r['path']} ({r['type']}): "
                       f"{why_kept(r, cast(float, event.safety))}")  # set: it kept them
    elif isinstance(event, TrialRun):
        trial = event.result
        cells = trial.fp32
        shown = ", ".join(cells[:4]) + (f" +{len(cells) - 4} more" if len(cells) > 4 else "")
        typer.echo(f"trial {trial.trial:>3} {trial.phase:<8} fp32 [{shown}] "
                   f"{_fmt_metric(trial.metrics)} -> {'pass' if trial.passed else 'FAIL'}")


def register(app: typer.Typer) -> None:
    convert_app.command("policy")(opt.handle_errors(policy_command))
    convert_app.command("ckpt")(opt.handle_errors(ckpt_command))
    convert_app.command("search")(opt.handle_errors(lim.with_limits(search_command,
                                                                   fp16_only=True)))
    app.add_typer(convert_app, name="convert")
