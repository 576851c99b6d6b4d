"""The resolved configuration of one parity check (thresholds: ``amptool.stats.metrics``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from amptool.artefact.keys import key_from_file
from amptool.errors import UsageError
from amptool.files.configfile import build_config, decided_later, layered
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
        from amptool.network.models import user_reference

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
