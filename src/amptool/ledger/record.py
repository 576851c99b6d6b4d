"""What one ledger record holds (``LedgerRecord``: one candidate of one parity check, each
output's figures and limits in an ``OutputEntry``) and how a parity report becomes records
(``records_from_report``), with where and when it ran (``RecordContext``: versions, the git
commit and branch, a label, the time).
"""
from __future__ import annotations

import os
import subprocess
from importlib import metadata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import amptool
from amptool.artefact.files import file_facts
from amptool.documents.figures import breaches
from amptool.files.fileio import jsonable
from amptool.ledger.facts import artefact_facts
from amptool.ledger.url import LedgerError

TASK = "task"
"""The name of the entry holding a candidate's task metric (``--metric``)."""


@dataclass(frozen=True)
class OutputEntry:
    """One output of a candidate (or its task metric) as judged."""

    name: str
    """The output's name (``task``: the task metric)."""
    passed: bool
    """Every limit held."""
    thresholds: Dict[str, Any]
    """The limits it was held to (``Thresholds`` as a dict; None: off)."""
    figures: Dict[str, Any]
    """Every figure computed (cosine, max_abs_scaled, p999_abs_scaled, ...; ``*_ci``: a 95 %
    interval)."""
    breaches: List[str] = field(default_factory=list)
    """Each failed check as ``metric value (limit ...)``."""

    def figure(self, name: str) -> Optional[float]:
        """A figure as a float (NaN where written as such; None: absent or no number)."""
        return as_number(self.figures.get(name))

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "thresholds": self.thresholds,
                "figures": jsonable(self.figures), "breaches": list(self.breaches)}

    @classmethod
    def from_dict(cls, data: dict) -> "OutputEntry":
        return cls(data["name"], bool(data["passed"]), dict(data.get("thresholds") or {}),
                   dict(data.get("figures") or {}), list(data.get("breaches") or []))


@dataclass(frozen=True)
class LedgerRecord:
    """One candidate of one parity check, as the ledger keeps it."""

    artefact: str
    """The candidate's path when checked."""
    sha256: str
    """The hex digest of its main file."""
    files: List[Dict[str, Any]]
    """Every file of the artefact (path relative to its folder, size, sha256), the main one
    first."""
    format: str
    """MINDIR, ONNX, ..."""
    precision: Optional[str]
    """fp32 or fp16 (None: unknown)."""
    passed: bool
    """The candidate's verdict."""
    verdict: str
    """PASS, FAIL, or PASS* (passed with a caveat: fp16 not exercised here)."""
    outputs: List[OutputEntry]
    """Each output as judged, then the task metric's entry (``task``) where there is one."""
    thresholds: Dict[str, Any]
    """The candidate's limits (its task metric's drop budget among them)."""
    recorded_at: str
    """When, in UTC (ISO 8601)."""
    model: Optional[str] = None
    """The model reference."""
    policy: Optional[Dict[str, Any]] = None
    """The precision policy the graph was built with."""
    kept_cells: Optional[List[str]] = None
    """The cells kept in fp32."""
    reference: Optional[str] = None
    """What the candidate was compared with."""
    reference_precision: Optional[str] = None
    """The reference's precision."""
    samples: Optional[int] = None
    """Samples compared."""
    device: Optional[str] = None
    """Where the check ran."""
    amptool_version: Optional[str] = None
    """amptool that checked it."""
    mindspore_version: Optional[str] = None
    """MindSpore that ran it."""
    commit: Optional[str] = None
    """The git commit of the checkout the check ran in."""
    branch: Optional[str] = None
    """Its branch (None: detached, or no checkout)."""
    label: Optional[str] = None
    """The ``--label`` given."""
    facts_from: Optional[str] = None
    """Where model, policy and kept cells came from: provenance, manifest or report."""
    id: Optional[int] = None
    """Its number in the ledger (None until appended); later records have larger ones."""

    @property
    def where(self) -> str:
        """The record's place in history: the short commit (with the label), else the label,
        else its time."""
        return place(self.commit, self.label, self.recorded_at)

    @property
    def weights(self) -> Tuple[str, ...]:
        """The sha256 of each file beside the main one, sorted: with ``sha256``, the bytes."""
        return tuple(sorted(str(f["sha256"]) for f in self.files[1:]))

    def output(self, name: str) -> Optional[OutputEntry]:
        return next((o for o in self.outputs if o.name == name), None)

    def failure(self) -> str:
        """What failed, as ``output: breach, ...`` (empty for a pass)."""
        parts = [f"{o.name}: {', '.join(o.breaches)}" for o in self.outputs
                 if not o.passed and o.breaches]
        return "; ".join(parts) if parts else ("" if self.passed else "a check failed")

    def to_dict(self) -> dict:
        """The record as JSON (``ledger show --json``)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["outputs"] = [o.to_dict() for o in self.outputs]
        return data


def place(commit: Optional[str], label: Optional[str], recorded_at: str) -> str:
    """A record's place in history (``LedgerRecord.where``)."""
    if commit:
        return commit[:10] + (f" {label}" if label else "")
    return label or recorded_at[:19].replace("T", " ")


class RecordHead(NamedTuple):
    """A record without its files, outputs and limits: what a trend reads of each of many."""

    id: int
    recorded_at: str
    artefact: str
    sha256: str
    format: str
    precision: Optional[str]
    model: Optional[str]
    commit: Optional[str]
    branch: Optional[str]
    label: Optional[str]
    passed: bool
    verdict: str

    @property
    def where(self) -> str:
        return place(self.commit, self.label, self.recorded_at)


@dataclass(frozen=True)
class RecordContext:
    """Where and when the records of one check are made."""

    recorded_at: str
    amptool_version: str
    mindspore_version: Optional[str]
    commit: Optional[str]
    branch: Optional[str]
    label: Optional[str]


def current_context(label: Optional[str] = None, cwd: Optional[str] = None) -> RecordContext:
    """This process's context: now, the versions installed, the git checkout ``cwd`` (this
    process's folder) is in, and ``label``."""
    commit, branch = checkout(cwd)
    return RecordContext(datetime.now(timezone.utc).isoformat(timespec="microseconds"),
                         amptool.__version__, _version("mindspore"), commit, branch,
                         label or None)


def checkout(cwd: Optional[str] = None) -> Tuple[Optional[str], Optional[str]]:
    """(commit, branch) of the git checkout ``cwd`` is in; (None, None) outside one or
    without git. A detached head (a CI checkout of a pull request) takes its branch from the
    CI's variables where set."""
    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                                  timeout=20, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() or None if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "-q", "HEAD")
    if commit is None:
        return None, None
    branch = git("symbolic-ref", "-q", "--short", "HEAD")
    if branch is None:
        branch = next((os.environ[v] for v in BRANCH_VARIABLES if os.environ.get(v)), None)
    return commit, branch


BRANCH_VARIABLES = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME")
"""CI variables naming the branch of a detached checkout (GitHub Actions, GitLab CI), read in
this order when git names none: the ledger records it as the record's branch."""


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def records_from_report(report: Any, context: RecordContext) -> List[LedgerRecord]:
    """One record per candidate of ``report`` (a ``ParityReport``), read by attribute: its
    bytes as the report recorded them (else as they are now), its facts from provenance or
    manifest, every output's figures and limits, the verdict."""
    return [_record(report, cand, context) for cand in report.candidates]


def _record(report: Any, cand: Any, context: RecordContext) -> LedgerRecord:
    files = _files(cand)
    facts = artefact_facts(cand.path)
    outputs = [OutputEntry(o.name, bool(o.passed), o.thresholds.to_dict(), o.metrics.figures(),
                           breaches(o)) for o in cand.outputs]
    if cand.task is not None:
        budget = cand.thresholds.max_metric_drop
        outputs.append(OutputEntry(TASK, bool(cand.task.passed), {"max_metric_drop": budget},
                                   cand.task.metrics.figures(), breaches(cand.task)))
    verdict = ("PASS" if cand.passed else "FAIL") + ("*" if cand.passed and cand.caveat else "")
    ref = report.reference
    return LedgerRecord(
        artefact=str(cand.path), sha256=files[0]["sha256"], files=files, format=cand.format,
        precision=cand.precision or facts.precision, passed=bool(cand.passed),
        verdict=verdict, outputs=outputs, thresholds=cand.thresholds.to_dict(),
        recorded_at=context.recorded_at, model=facts.model or _model(ref.model),
        policy=facts.policy, kept_cells=facts.kept_cells, reference=ref.path,
        reference_precision=ref.precision, samples=report.inputs.samples,
        device=report.device, amptool_version=context.amptool_version,
        mindspore_version=context.mindspore_version, commit=context.commit,
        branch=context.branch, label=context.label, facts_from=facts.source)


def _files(cand: Any) -> List[Dict[str, Any]]:
    """The candidate's files as the report recorded them when it was checked, else as they
    are now."""
    recorded = getattr(cand, "files", None)
    if recorded:
        return [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in recorded]
    if not Path(cand.path).is_file():
        raise LedgerError(f"candidate {cand.path} cannot be recorded: its file is gone and the "
                          "report does not record its sha256",
                          "check the artefact again where it is")
    return file_facts(cand.path)


def _model(model: Any) -> Optional[str]:
    if isinstance(model, dict):
        return model.get("model") or model.get("name")
    return None if model is None else str(model)


def as_number(value: Any) -> Optional[float]:
    """A figure as a float: NaN/Inf also from their JSON strings; None for no number."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)

