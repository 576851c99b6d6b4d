"""The configs of ``amptool convert``'s commands, ``SearchConfig`` (``convert search``),
``CkptConfig`` (``convert ckpt``) and ``PolicyConfig`` (``convert policy``), and
``validate``: every mistake of one at once, before any work. Imports neither numpy nor
MindSpore: the command line builds and checks them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from amptool.console.options import check_output_path
from amptool.errors import UsageError, problems_of, raise_problems
from amptool.files.configfile import decided_later
from amptool.network.checkpoint import FORMATS
from amptool.network.taskmetric import check_metric_spec
from amptool.network.trust import user_reference
from amptool.precision.safety import SAFETY, check_range_safety
from amptool.report.plotting import pyplot
from amptool.stats.limits import Thresholds, resolve_thresholds, validate_file_thresholds

TARGETS = ("fp16", "fp32")
"""The float dtypes ``convert ckpt`` writes."""
DEFAULT_LEVEL = "O2"
"""The level shown when neither a level nor a policy file is given."""
DEFAULT_DTYPE = "fp16"
"""The low dtype when none is given."""


@dataclass(frozen=True)
class SearchConfig:
    """What ``amptool convert search`` was asked to do."""

    run: Optional[str] = None
    """Training run folder (run.json + best checkpoint)."""
    ckpt: Optional[str] = None
    """Checkpoint to search on (instead of, or overriding, the run's)."""
    model: Optional[str] = decided_later("the run's")
    """Model of ``ckpt``: sample name or file.py:factory (default: the run's)."""
    model_args: Optional[dict] = None
    """Keyword arguments for ``model``'s factory (``--model-arg KEY=VALUE``)."""
    input_spec: Optional[str] = None
    """``model``'s input signature, when it declares none (``--input-spec``)."""
    data: Optional[str] = decided_later("the run's, else digits")
    """Data source of the inputs (default: the run's, else digits); its held-out split is used."""
    samples: Optional[int] = 256
    """Held-out samples in the batch every trial runs (None: the whole split)."""
    level: str = "O3"
    """Base level, O3 (all fp16) or O2 (BatchNorm/LayerNorm kept fp32)."""
    policy: Optional[str] = None
    """Base policy file (overrides ``level``); its fp32 cells and types stay fp32."""
    thresholds: Optional[Thresholds] = None
    """Parity limits every output of every trial must meet; None: parity's fp16-vs-fp32
    limits for what each output is (top-1 and accuracy for class logits: the declared
    ``class_logits``, else the first output of a classifier's run; for any other output the
    scale-aware error bounds, ``p999_abs_scaled`` 2^-5 and ``max_abs_scaled`` 2^-4, and no
    top-1), with ``threshold_table`` and ``threshold_flags`` over them."""
    threshold_table: Optional[dict] = None
    """A parity config's ``thresholds`` table (its general, ``fp16_vs_fp32`` and each
    output's ``outputs.<index or outputN>`` tables apply)."""
    threshold_flags: Optional[dict] = None
    """Limits given as flags (``limits.flag_overrides``), over the table."""
    metric: Optional[str] = None
    """A task metric ``path/file.py:fn`` (parity's ``--metric``: fn(outputs, targets) ->
    float, higher is better): every trial's drop from the fp32 reference's value must stay
    within ``max_metric_drop`` (default 0) as well."""
    out: str = "policy.toml"
    """Where the found policy is written (.toml, .yaml or .json)."""
    force: bool = False
    """Overwrite ``out`` if it exists."""
    device: str = "auto"
    """auto, CPU, GPU or Ascend."""
    range_safety: Optional[float] = SAFETY
    """Range pass first: cells (blocks included) whose fp32 outputs or inputs reach this
    share of fp16's largest value, or are mostly fp16-subnormal, or break computing alone
    in fp16, stay fp32 before any trial; None skips it."""
    plot: Optional[str] = None
    """Write the range pass's chart here (PNG; needs matplotlib)."""


@dataclass(frozen=True)
class CkptConfig:
    """What ``amptool convert ckpt`` was asked to do."""

    src: str
    """Checkpoint to read (ckpt or safetensors; the format is detected from the content)."""
    dst: str
    """File to write."""
    to: str = "fp16"
    """Target float dtype: fp16 or fp32."""
    format: Optional[str] = decided_later("from OUT's extension, else ckpt")
    """Output format, ckpt or safetensors; None: from dst's extension (.safetensors), else ckpt."""
    policy: Optional[str] = decided_later("O2 when the model is known")
    """Policy file whose fp32 cells keep their parameters in fp32 (needs the model)."""
    model: Optional[str] = decided_later("the checkpoint's 'model' entry")
    """Network the checkpoint belongs to; None: the checkpoint's own 'model' entry, if any."""
    model_args: Optional[dict] = None
    """Keyword arguments for ``model``'s factory (``--model-arg KEY=VALUE``)."""
    input_spec: Optional[str] = None
    """``model``'s input signature, when it declares none (``--input-spec``)."""
    all_floats: bool = False
    """Convert every float entry, ignoring the policy's fp32 cells."""
    weights_only: bool = False
    """Write only the network's parameters (drop optimizer and loss-scale state, counters)."""
    force: bool = False
    """Overwrite dst if it exists."""


@dataclass(frozen=True)
class PolicyConfig:
    """What ``amptool convert policy`` was asked to show or write."""

    level: Optional[str] = decided_later(DEFAULT_LEVEL)
    """Built-in level O0-O3 (default O2 when no policy file is given)."""
    dtype: Optional[str] = decided_later(DEFAULT_DTYPE)
    """Low-precision dtype: float16 (fp16) or bfloat16 (bf16)."""
    policy: Optional[str] = None
    """A policy file to read (TOML/YAML/JSON, or a run.json/manifest)."""
    fp32_types: tuple = ()
    """Extra cell types kept in fp32."""
    fp32_cells: tuple = ()
    """Extra cell paths kept in fp32."""
    fp16_cells: tuple = ()
    """Cell paths forced to the low dtype."""
    model: Optional[str] = None
    """Network to resolve the policy against."""
    model_args: Optional[dict] = None
    """Keyword arguments for ``model``'s factory (``--model-arg KEY=VALUE``)."""
    input_spec: Optional[str] = None
    """``model``'s input signature, when it declares none (``--input-spec``)."""
    device: Optional[str] = None
    """Check the dtype runs on this device (CPU refuses bfloat16)."""
    out: Optional[str] = None
    """Write the policy to this file (.toml, .yaml or .json)."""
    force: bool = False
    """Overwrite ``out``."""


def validate(cfg: Union[SearchConfig, CkptConfig, PolicyConfig]) -> None:
    """Raise one UsageError naming every mistake of ``cfg`` (each with its fix); nothing
    when there is none."""
    if isinstance(cfg, SearchConfig):
        raise_problems(_search_problems(cfg))
    elif isinstance(cfg, CkptConfig):
        raise_problems(_ckpt_problems(cfg))
    else:
        raise_problems(_policy_problems(cfg))


def _search_problems(cfg: SearchConfig) -> list:
    """A drop budget without its metric, a metric that is no path/file.py:fn, limits that
    do not resolve, a chart that cannot be written, a range share outside (0, 1]."""
    problems = []
    if "max_metric_drop" in (cfg.threshold_flags or {}) and not cfg.metric:
        problems.append(("--max-metric-drop needs --metric", "add --metric path/file.py:fn"))
    if cfg.metric:
        problems += problems_of(check_metric_spec, cfg.metric)
    if cfg.threshold_table is not None:
        problems += problems_of(validate_file_thresholds, cfg.threshold_table, "threshold_table")
    if not problems:  # the limits resolve once the table is sound
        problems += problems_of(lambda: resolve_thresholds(
            "fp32", "fp16", cfg.threshold_table, cfg.threshold_flags, output=(0, "output0")))
    if cfg.plot is not None:
        problems += problems_of(check_output_path, Path(cfg.plot), "--plot")
        problems += problems_of(pyplot)  # matplotlib missing: refused before any work
    return problems + problems_of(check_range_safety, cfg.range_safety, "--range-safety",
                                  "e.g. --range-safety 0.5", True)


def output_format(cfg: CkptConfig) -> str:
    """The format ``convert ckpt`` writes: ``format``, else from dst's extension."""
    if cfg.format is None:
        return "safetensors" if Path(cfg.dst).suffix.lower() == ".safetensors" else "ckpt"
    if cfg.format not in FORMATS:
        raise UsageError(f"unknown checkpoint format '{cfg.format}'", "use ckpt or safetensors")
    return cfg.format


def _ckpt_problems(cfg: CkptConfig) -> list:
    """The target and format, then the input that must be there and the output that must
    not be (unless ``force``), nor be the input."""
    values = []
    if cfg.to not in TARGETS:
        values.append(f"unknown target dtype '{cfg.to}' (use fp16 or fp32)")
    if cfg.format is not None and cfg.format not in FORMATS:
        values.append(f"unknown checkpoint format '{cfg.format}' (use ckpt or safetensors)")
    problems = [(problem, "fix the options") for problem in values]
    src, dst = Path(cfg.src), Path(cfg.dst)
    if not src.is_file():
        problems.append((f"checkpoint {src} does not exist", "check the input path"))
    if dst.exists() and dst.resolve() == src.resolve():
        problems.append((f"output {dst} is the input file",
                         "write the converted checkpoint elsewhere"))
    elif dst.exists() and not cfg.force:
        problems.append((f"{dst} already exists", "pass --force to overwrite it"))
    elif dst.is_dir():
        problems.append((f"{dst} is a folder", "give a file path for the converted checkpoint"))
    elif not dst.parent.is_dir():
        problems.append((f"folder {dst.parent} does not exist",
                         "create it or choose another path"))
    return problems


def _policy_problems(cfg: PolicyConfig) -> list:
    """A policy file given with what would build one, factory arguments without a model."""
    problems = []
    if cfg.policy and (cfg.level or cfg.dtype or cfg.fp32_types or cfg.fp32_cells
                       or cfg.fp16_cells):
        problems.append(("--policy cannot be combined with --level, --dtype or cell options",
                         "edit the policy file, or build one from --level and cell options"))
    return problems + problems_of(user_reference, cfg.model, cfg.model_args, cfg.input_spec)
