"""The resolved configuration of one training run: ``TrainConfig``, ``LaunchOptions`` and
every option of ``amptool train`` from a config file and flags. Imports neither numpy nor
MindSpore: the command line builds it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, make_dataclass
from typing import Any, Mapping, Optional

from amptool.errors import UsageError
from amptool.files.configfile import build_config, decided_later, layered
from amptool.precision.safety import SAFETY

AUTO = "auto"
"""``--policy auto``: the range pass picks the cells to keep in fp32 before the first step."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``amptool train`` needs; defaults are the bundled quick run."""

    model: str = "simplecnn"
    """Sample name, path/to/file.py:factory or package.module:factory."""
    model_args: Optional[dict] = None
    """Keyword arguments for the model factory (``--model-arg KEY=VALUE``)."""
    input_spec: Optional[str] = None
    """The model's input signature, NAME:SHAPE:DTYPE[:LOW..HIGH],... (when it declares none)."""
    data: str = "digits"
    """digits, synthetic, tokens, sequences, boxes (NAME:N for their first N samples),
    mnist:DIR, imagefolder:DIR or npz:FILE."""
    loss: Optional[str] = decided_later("cross-entropy for class logits on integer labels")
    """cross-entropy, token-cross-entropy[:IGNORE], mse, l1, smooth-l1, bce,
    path/to/file.py:factory or package.module:factory; None: cross-entropy for class logits
    on integer labels (else the run asks for one)."""
    metric: Optional[str] = decided_later("accuracy for classifiers, else minus the validation "
                                          "loss")
    """A task metric path/to/file.py:fn (fn(outputs, targets) -> float, higher is better)
    evaluated on the held-out split each epoch; it picks best. None: accuracy for
    classifiers, else the negative validation loss."""
    amp_level: str = "O2"
    """O0, O1, O2 or O3 (ignored when ``policy`` names a file)."""
    policy: Optional[str] = None
    """Precision policy file (TOML/YAML/JSON); None means the level's built-in policy."""
    range_safety: float = SAFETY
    """``policy = "auto"``: the share of 65504 an fp32 output or input may reach before its
    cell is kept in fp32."""
    loss_scale: Optional[str] = decided_later("dynamic for O1/O2, none for O0/O3")
    """dynamic, static:VALUE or none; None means dynamic for O1/O2 and none for O0/O3."""
    scale_init: float = 65536.0
    """Initial dynamic loss scale (2**16, as torch GradScaler and Apex)."""
    scale_factor: int = 2
    """Dynamic loss scale growth/back-off factor."""
    scale_window: int = 2000
    """Clean steps before the dynamic loss scale grows."""
    max_skipped: int = 50
    """Consecutive skipped (overflow) steps that count as divergence."""
    log_every: int = 10
    """Steps between read-backs of loss, loss scale and skip counts (metrics.jsonl lines);
    the first and last step of each epoch are read too."""
    epochs: int = 5
    """Total epochs (a resumed run continues up to this number)."""
    batch_size: int = 32
    """Per-worker batch size; the global batch is batch_size x workers."""
    lr: float = 0.001
    """Learning rate."""
    optimizer: str = "adam"
    """adam, sgd or momentum."""
    seed: int = 0
    """Seed for weights and data order."""
    device: str = "auto"
    """auto, CPU, GPU or Ascend."""
    out: str = "runs/train"
    """Output folder for checkpoints, metrics.jsonl and run.json."""
    val_fraction: float = 0.2
    """Held-out validation fraction (the split is fixed by the data)."""
    ckpt_format: str = "ckpt"
    """Checkpoint format: ckpt or safetensors."""
    resume: bool = False
    """Continue from ``last`` in ``out`` (weights, optimizer, loss scale, epoch, data order)."""
    overwrite: bool = False
    """Replace the trained run ``out`` holds (its run.json, checkpoints and metrics are
    removed once the new run is set up); without it or ``resume`` such a folder is refused."""
    workers: int = 1
    """Data-parallel workers launched on this host through msrun."""
    sink_size: Optional[int] = decided_later("--log-every on Ascend/GPU, off on CPU")
    """Steps per host call through ``mindspore.data_sink`` (Ascend and GPU; None: log_every
    there, off on CPU, where an explicit value is refused)."""
    data_workers: Optional[int] = decided_later("the cores, up to 8")
    """Parallel workers of the data pipeline (read, decode, resize); None: the cores, up to 8."""
    augment: Optional[str] = decided_later("none")
    """Training-only image augmentation, comma-separated: crop (a random window of the image
    zero-padded by an eighth of each side), flip (half the images mirrored left to right);
    each image's draws fixed by (seed, epoch, row). None: none."""

    @classmethod
    def from_file(cls, path=None, **flags) -> "TrainConfig":
        """A training run as ``amptool train --config`` builds it: the config file at
        ``path``, then ``flags`` (None: not given); launch options in the file are checked
        and left to ``LaunchOptions``."""
        return layered(build_command_config, path, flags)[0]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LaunchOptions:
    """How a data-parallel job is laid out across hosts (msrun); one host by default."""

    nodes: int = 1
    """Hosts taking part; ``TrainConfig.workers`` ranks run on each."""
    node_rank: int = 0
    """This host's rank among ``nodes``."""
    master_addr: str = "127.0.0.1"
    """Address of the rank-0 host."""
    master_port: int = 0
    """msrun's port; 0 picks a free one (several nodes need an explicit port)."""
    start_timeout: Optional[float] = decided_later("120, or 600 with several --nodes")
    """Seconds every rank has to start and join; None: 120, or 600 with several nodes."""
    quiet: bool = False
    """Forward no per-step events from the ranks."""


COMMAND_ONLY = {"json": False}
"""Options of ``amptool train`` that are neither training settings nor launch layout."""


def _command_options():
    """One dataclass holding every option of ``amptool train`` (the config file's keys)."""
    specs = [(f.name, f.type, field(default=f.default))
             for f in fields(TrainConfig) + fields(LaunchOptions)]
    specs += [(name, type(default).__name__, field(default=default))
              for name, default in COMMAND_ONLY.items()]
    return make_dataclass("TrainCommandOptions", specs, frozen=True)


def build_command_config(file_values: Mapping[str, Any], flags: Mapping[str, Any],
                         source: str = "config") -> tuple:
    """Every option of ``amptool train`` from a config file, overridden by the flags given
    (None: not given): ``(TrainConfig, LaunchOptions, as_json)``. Unknown keys and bad
    values are reported together in one error."""
    timeout = (file_values or {}).get("start_timeout", (file_values or {}).get("start-timeout"))
    bad_timeout = timeout is not None and (isinstance(timeout, bool)
                                           or not isinstance(timeout, (int, float)))
    extra = f"start_timeout must be a number of seconds, got {timeout!r}" if bad_timeout else ""
    try:
        options = build_config(_command_options(), file_values, flags, source=source)
    except UsageError as exc:
        if extra:
            raise UsageError(f"{exc.problem}; {extra}", exc.fix) from None
        raise
    if extra:
        raise UsageError(f"{source}: {extra}", "give start_timeout in seconds, e.g. 300")
    values = {f.name: getattr(options, f.name) for f in fields(options)}
    train = TrainConfig(**{f.name: values[f.name] for f in fields(TrainConfig)})
    launch = LaunchOptions(**{f.name: values[f.name] for f in fields(LaunchOptions)})
    return train, launch, bool(values["json"])
