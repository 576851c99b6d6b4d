"""``PipelineConfig``: what ``amptool run`` is asked to do (the training run, the output
folder, ONNX, the parity check, the report it is compared with), from a config file and
flags. Imports neither numpy nor MindSpore: the command line builds it; ``amptool.pipeline``
runs it."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from amptool.errors import UsageError
from amptool.files.configfile import SHOWN, build_config, decided_later, layered
from amptool.ledger.url import shown
from amptool.stats.regression import TABLE as REGRESSION
from amptool.stats.regression import RegressionBudget, budget_from_table
from amptool.train.config import TrainConfig


@dataclass(frozen=True)
class PipelineConfig:
    """Everything ``amptool run`` needs; the defaults are the bundled quick pipeline."""

    train: Optional[TrainConfig] = None
    """The training run (its ``out`` is replaced by ``<out>/train``); None: the defaults."""
    out: str = "runs/pipeline"
    """Output folder (train/, export/, parity.json, parity.xml, summary.json; diff.json with
    a baseline)."""
    onnx: str = "auto"
    """ONNX artefacts too: auto (when the onnx extra is installed; skipped with one warning
    when the network cannot be written as ONNX), on (such a failure fails the run) or off."""
    samples: Optional[int] = decided_later("all")
    """Held-out samples in the parity check (all when None)."""
    per_layer: bool = False
    """Add per-layer localization of every artefact to the parity report."""
    localize: bool = True
    """Localize each artefact that fails parity by itself (per-layer, on its failing
    samples); a passing run costs nothing more."""
    overwrite: bool = False
    """Replace the pipeline run ``out`` holds (its trained run, artefacts and reports);
    without it such a folder is refused."""
    workers: int = 1
    """Processes (msrun, on this host) that each compare a contiguous shard of the parity
    check's samples; their statistics merge into the report one process makes. Training
    runs in one process."""
    ledger: Optional[str] = None
    """A parity ledger (a path, sqlite:///PATH or postgresql+psycopg://...) to record in."""
    label: Optional[str] = None
    """A name for the ledger's records (a release, a CI job), beside the git commit."""
    baseline: Optional[str] = None
    """A report to compare this run's parity report with, as 'amptool diff BASE NEW' does
    (main's run, the last release's): a parity.json, an 'amptool run --out' folder or its
    summary.json. Read before training; the diff is written to diff.json and report.html,
    and a regression beyond the regression budget fails the run (exit 1)."""
    regression: RegressionBudget = field(default_factory=RegressionBudget,
                                         metadata={SHOWN: "the [regression] defaults"})
    """The budget the diff against the baseline is judged under: the config file's
    [regression] table (the keys of parity's, which 'amptool diff --config' reads too)."""

    @classmethod
    def from_file(cls, path=None, **flags) -> "PipelineConfig":
        """A pipeline as ``amptool run`` builds it: the config file at ``path`` (the
        pipeline's keys and any training setting but out, resume and workers), then
        ``flags`` (None: not given)."""
        return layered(build_pipeline_config, path, flags)

    def to_dict(self) -> dict:
        train = self.train_config()
        return {"train": train.to_dict(), "out": self.out, "onnx": self.onnx,
                "samples": self.samples, "per_layer": self.per_layer,
                "localize": self.localize, "overwrite": self.overwrite,
                "workers": self.workers, "label": self.label,
                "ledger": None if self.ledger is None else shown(self.ledger),
                "baseline": self.baseline, "regression": self.regression.to_dict()}

    def train_config(self):
        base = self.train if self.train is not None else TrainConfig()
        return dataclasses.replace(base, out=str(Path(self.out) / "train"), resume=False,
                                   overwrite=self.overwrite, workers=1)


PIPELINE_KEYS = tuple(f.name for f in dataclasses.fields(PipelineConfig) if f.name != "train")
_NOT_IN_PIPELINE = ("out", "resume", "workers", "overwrite")


def build_pipeline_config(file_values: dict, flags: dict, source: str) -> PipelineConfig:
    """Flat keys (a config file, then flags) into a PipelineConfig: the pipeline's own keys
    (a file's ``[regression]`` table among them) plus any training setting except out, resume
    and workers."""
    train_keys = {f.name for f in dataclasses.fields(TrainConfig)} - set(_NOT_IN_PIPELINE)
    norm = {k.replace("-", "_"): v for k, v in file_values.items()}
    unknown = sorted(k for k in norm if k not in train_keys and k not in PIPELINE_KEYS)
    if unknown:
        raise UsageError(f"{source}: unknown key(s) {', '.join(unknown)}",
                         f"known keys: {', '.join(sorted(train_keys | set(PIPELINE_KEYS)))}")
    split = lambda values, keys: {k: v for k, v in values.items() if k in keys}  # noqa: E731
    train = build_config(TrainConfig, split(norm, train_keys), split(flags, train_keys), source)
    table = norm.pop(REGRESSION, None)  # a table of its own: every bad key of it named now
    budget = budget_from_table(table, source) if table is not None else None
    if flags.get(REGRESSION) is None:
        flags = {**flags, REGRESSION: budget}
    own = build_config(PipelineConfig, split(norm, PIPELINE_KEYS), split(flags, PIPELINE_KEYS),
                       source)
    return dataclasses.replace(own, train=train)
