"""The resolved configuration of one parity check (thresholds: ``amptool.stats.metrics``) and
``validate``: every mistake in it at once. Imports neither numpy nor MindSpore: the command
line builds it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from amptool.artefact.keys import key_from_file
from amptool.errors import UsageError, problems_of, raise_problems
from amptool.files.configfile import build_config, decided_later, layered
from amptool.ledger.url import ledger_url
from amptool.network.trust import user_reference
from amptool.stats.limits import validate_file_thresholds
from amptool.stats.regression import TABLE as REGRESSION, budget_from_table


@dataclass(frozen=True)
class ParityConfig:
    """Everything ``amptool parity`` needs."""

    reference: Optional[str] = None
    """Artefact, checkpoint or training run folder; empty when ``load_outputs`` is given."""
    candidates: tuple = ()
    """Artefacts compared against the reference."""
    data: Optional[str] = decided_later("the manifest's data, else digits")
    """Data source of real samples; empty means the manifest's, else the bundled digits."""
    samples: Optional[int] = decided_later("all")
    """How many held-out samples (all when None)."""
    val_fraction: Optional[float] = None
    """Held-out fraction of the data; None means the manifest's (else 0.2)."""
    inputs: Optional[str] = None
    """An .npz of ready inputs fed as they are (instead of ``data``)."""
    save_outputs: Optional[str] = None
    """Write the reference's outputs, inputs and labels to this .npz."""
    load_outputs: Optional[str] = None
    """Compare against outputs stored by ``save_outputs`` instead of running a reference."""
    model: Optional[str] = None
    """Model for per-layer localization when a manifest does not name one."""
    model_args: Optional[dict] = None
    """Keyword arguments for ``model``'s factory."""
    input_spec: Optional[str] = None
    """``model``'s input signature, when it declares none."""
    ckpt: Optional[str] = None
    """Checkpoint for per-layer localization when weights cannot be read from an artefact."""
    key: Optional[bytes] = field(default=None, repr=False)
    """Decryption key of encrypted MindIR artefacts; never printed or written."""
    per_layer: bool = False
    """Localize the first diverging cell of each candidate."""
    localize: bool = True
    """Localize each candidate that fails, by itself: the per-layer pass on its failing
    samples, the network rebuilt from the artefacts' manifests (or ``model``); a candidate
    that cannot be localized says why. A passing candidate costs nothing more."""
    layer_samples: int = 32
    """Samples used by the per-layer pass."""
    layer_min_cosine: Optional[float] = decided_later("the candidate's --min-cosine")
    """Per-cell cosine limit; None means the candidate's min_cosine."""
    thresholds: dict = field(default_factory=dict)
    """Overrides for every pair (from flags): threshold name -> value (None = off)."""
    file_thresholds: dict = field(default_factory=dict)
    """A config file's ``thresholds`` table (may hold the pair tables)."""
    metric: Optional[str] = None
    """A user task metric ``path/file.py:fn``: fn(outputs, labels) -> float, higher is better;
    its drop (reference minus candidate) is held to the ``max_metric_drop`` threshold."""
    device: str = "auto"
    """auto, CPU, GPU or Ascend."""
    emulate_settings: bool = True
    """For each fp16 candidate that keeps cells in fp32: also run its network with those cells
    in fp16 (what a runtime ignoring the deployment settings computes) and report whether the
    gate would pass; informational, never part of the verdict."""
    batch_size: int = 512
    """Samples per call for artefacts with a dynamic batch dimension (each new batch shape
    costs a graph compilation, so few large calls are fastest)."""
    workers: int = 1
    """Processes on this host that each compare a shard of the samples (through msrun);
    their statistics merge into one report, the same as one process makes."""
    nodes: int = 1
    """Hosts taking part; ``workers`` processes run on each."""
    node_rank: int = 0
    """This host's index among ``nodes`` (0 merges the shards and writes the report)."""
    master_addr: str = "127.0.0.1"
    """Address of the host of node rank 0 (msrun's scheduler)."""
    master_port: int = 0
    """Port of msrun's scheduler; 0 picks a free one (one host only)."""
    ledger: Optional[str] = None
    """Append one record per candidate to this parity ledger: a path or ``sqlite:///PATH``
    (an SQLite file, made when missing) or ``postgresql+psycopg://USER@HOST/DB``."""
    label: Optional[str] = None
    """A name for the ledger's records (a release, a CI job); the git commit and branch are
    recorded too when the check runs inside a checkout."""

    @property
    def sharded(self) -> bool:
        """Whether the samples are split across several processes."""
        return self.workers * self.nodes > 1

    @classmethod
    def from_file(cls, path=None, artefacts=(), key_file=None, **flags) -> "ParityConfig":
        """A parity check as ``amptool parity`` builds it: the config file at ``path`` (its
        keys, and its ``thresholds`` table checked now), then ``flags`` (None: not given);
        ``artefacts``: the reference, then the candidates (all candidates with
        ``load_outputs``); ``key_file``: the MindIR key's file."""
        return layered(lambda values, given, source: _build(values, given, source, artefacts,
                                                            key_file), path, flags)

    def user_model(self) -> Optional[dict]:
        """The model the user named (with its arguments), or None."""
        return user_reference(self.model, self.model_args, self.input_spec)


def _build(file_values: dict, flags: dict, source: str, artefacts, key_file) -> ParityConfig:
    file_values = dict(file_values)
    file_th = validate_file_thresholds(file_values.pop("thresholds", {}), source)
    budget_from_table(file_values.pop(REGRESSION, {}), source)  # amptool diff's, checked now
    for bad in ("reference", "candidates", "thresholds", "file_thresholds", "key"):
        if bad in file_values:
            raise UsageError(f"{source}: '{bad}' cannot be set in a config file",
                             "give artefacts on the command line")
    key = None
    if key_file is not None:
        key = key_from_file(key_file)
    artefacts = [str(a) for a in artefacts]
    load = flags.get("load_outputs") or file_values.get("load_outputs")
    if not artefacts and not load:
        raise UsageError("no artefact to check", "name the reference, then the candidates")
    ref, cands = (None, tuple(artefacts)) if load else (artefacts[0], tuple(artefacts[1:]))
    overrides = {**flags, "reference": ref, "candidates": cands, "key": key,
                 "thresholds": flags.get("thresholds") or {}, "file_thresholds": file_th}
    return build_config(ParityConfig, file_values, overrides, source=source)


COUNTS = ("samples", "layer_samples", "batch_size")
"""The settings that count samples: whole numbers >= 1 (None: their default)."""


def validate(cfg: ParityConfig) -> None:
    """Raise one UsageError naming every mistake of ``cfg`` (each with its fix); nothing
    when there is none."""
    problems = _source_problems(cfg)
    for name in COUNTS:
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            problems.append((f"--{name.replace('_', '-')} must be a whole number >= 1 "
                             f"(got {value!r})", "give a positive count"))
    lmc = cfg.layer_min_cosine
    if lmc is not None and (isinstance(lmc, bool) or not isinstance(lmc, (int, float))):
        problems.append((f"--layer-min-cosine must be a number (got {lmc!r})", "e.g. 0.99"))
    table = cfg.file_thresholds or {}
    tables = [cfg.thresholds, table] + [v for v in table.values() if isinstance(v, dict)]
    if any("max_metric_drop" in t for t in tables) and not cfg.metric:
        problems.append(("--max-metric-drop needs --metric", "add --metric path/file.py:fn"))
    if cfg.ledger is not None:  # a URL amptool cannot take is refused before any work
        problems += problems_of(ledger_url, cfg.ledger)
    raise_problems(problems)


def _source_problems(cfg: ParityConfig) -> list:
    """(problem, fix) of what is compared with what: the reference, candidates, golden
    outputs and inputs."""
    problems = []
    if cfg.load_outputs and cfg.save_outputs:
        problems.append(("--load-outputs and --save-outputs exclude each other",
                         "save golden outputs in one run, compare against them in another"))
    if cfg.load_outputs and not cfg.candidates:
        problems.append(("--load-outputs needs at least one candidate artefact",
                         "amptool parity --load-outputs FILE.npz CANDIDATE"))
    if not cfg.load_outputs and not cfg.reference:
        problems.append(("no reference given", "amptool parity REFERENCE CANDIDATE"))
    elif not cfg.load_outputs and not cfg.candidates and not cfg.save_outputs:
        problems.append(("no candidate to compare with the reference",
                         "amptool parity REFERENCE CANDIDATE [CANDIDATE ...] "
                         "(or --save-outputs FILE)"))
    if cfg.inputs and cfg.data:
        problems.append(("--inputs and --data exclude each other", "give one source of inputs"))
    return problems
