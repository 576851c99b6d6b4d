"""``verify``: whether the exact bytes of an artefact (its file and weight files) passed parity
under limits no looser than the gate's, and no later check failed them: a deploy job's last
step, answered from a parity ledger or from a parity report.

The gate's limits are the defaults of each output (by the pair of precisions and what the
output is), or a config file's ``thresholds`` table and limit flags, as ``amptool parity``
resolves them. A record whose limits are looser on any figure the output has does not count
as a pass. Records are matched by bytes, not by name: the main file's sha256 and the sha256
of every file beside it, whatever the files are called now.
"""
from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional

from amptool.artefact.files import hashed_files
from amptool.documents.door import read_document
from amptool.documents.parity import PARITY_REPORT
from amptool.errors import UsageError
from amptool.files.configfile import read_config_file
from amptool.ledger.record import TASK, LedgerRecord, OutputEntry, RecordContext
from amptool.ledger.record import records_from_report
from amptool.ledger.store import RecordFilter, open_ledger
from amptool.stats.limits import CHECKS, Thresholds, resolve_thresholds, validate_file_thresholds

PASSED, NEVER, FAILED, LOOSER, LATER = (
    "passed", "never tested", "failed", "looser limits", "later failure")
REASONS = (PASSED, NEVER, FAILED, LOOSER, LATER)
"""What ``Verification.reason`` may be: exit 0 for the first, 1 for the others."""


@dataclass(frozen=True)
class Verification:
    """The answer for one artefact."""

    artefact: str
    """The artefact as given."""
    passed: bool
    """Its bytes passed under limits no looser than the gate's, and no later check failed."""
    reason: str
    """passed, never tested, failed, looser limits or later failure."""
    line: str
    """The one line that says why."""
    source: str
    """The ledger (as it may be printed) or report read."""
    files: List[Dict[str, Any]] = field(default_factory=list)
    """The artefact's files as hashed now (path, size, sha256), the main one first."""
    record: Optional[LedgerRecord] = None
    """The record the answer rests on: the pass, the failure, or the looser pass."""
    records: int = 0
    """Records of these bytes found."""

    def to_dict(self) -> dict:
        """``amptool verify --json``."""
        rec = self.record
        return {"artefact": self.artefact, "passed": self.passed, "reason": self.reason,
                "line": self.line, "source": self.source, "files": self.files,
                "records": self.records,
                "record": None if rec is None else {
                    "id": rec.id, "recorded_at": rec.recorded_at, "commit": rec.commit,
                    "branch": rec.branch, "label": rec.label, "verdict": rec.verdict,
                    "samples": rec.samples}}


@dataclass(frozen=True)
class Gate:
    """The limits the gate holds a record to: a config file's ``thresholds`` table and flags
    over the defaults of each output."""

    table: Dict[str, Any] = field(default_factory=dict)
    flags: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_file(cls, config: Optional[str] = None, flags: Optional[dict] = None) -> "Gate":
        """The ``thresholds`` table of the config file at ``config`` (its other keys are
        ignored: a parity config serves as it is) and ``flags`` (threshold name -> value)."""
        table = {}
        if config is not None:
            source = f"config {config}"
            table = validate_file_thresholds(read_config_file(config).get("thresholds", {}),
                                             source)
        return cls(table, dict(flags or {}))

    def output_limits(self, rec: LedgerRecord, index: int, out: OutputEntry) -> Thresholds:
        """What the gate needs of output ``index`` of ``rec``: by its precisions and by what
        the output is (class logits where it has top-1 figures), as parity resolves it."""
        logits = "top1_agree" in out.figures
        return resolve_thresholds(rec.reference_precision or "fp32", rec.precision, self.table,
                                  self.flags, output=(index, out.name), logits=logits,
                                  bound_scaled=not logits)

    def looser(self, rec: LedgerRecord) -> Optional[str]:
        """Where ``rec`` was held to looser limits than the gate's (None: nowhere), as
        ``logits: min_cosine 0.99, the gate needs >= 0.999``."""
        outputs = [o for o in rec.outputs if o.name != TASK]
        for index, out in enumerate(outputs):
            found = _looser(out, self.output_limits(rec, index, out))
            if found:
                return f"{out.name}: {found}"
        task = rec.output(TASK)
        if task is not None:
            need = resolve_thresholds(rec.reference_precision or "fp32", rec.precision,
                                      self.table, self.flags).max_metric_drop
            got = task.thresholds.get("max_metric_drop")
            if need is not None and (got is None or got > need):
                return f"task: max_metric_drop {_limit(got)}, the gate needs <= {_limit(need)}"
        return None


def _looser(out: OutputEntry, need: Thresholds) -> Optional[str]:
    got = out.thresholds
    for limit, figure, op in CHECKS:
        wanted = getattr(need, limit)
        if wanted is None or figure not in out.figures:
            continue  # the gate sets no such limit, or the output has no such figure
        have = got.get(limit)
        if have is None or (have < wanted if op == ">=" else have > wanted):
            return f"{limit} {_limit(have)}, the gate needs {op} {_limit(wanted)}"
    if got.get("allow_nonfinite") and not need.allow_nonfinite:
        return "NaN/Inf allowed, the gate allows none"
    if need.max_outside is not None and "outside_frac" in out.figures:
        for tol in ("atol", "rtol"):
            have, wanted = float(got.get(tol, 0.0)), getattr(need, tol)
            if have > wanted:
                return f"{tol} {_limit(have)}, the gate needs <= {_limit(wanted)}"
    return None


def _limit(value) -> str:
    return "off" if value is None else f"{value:.10g}"


def verify(artefact: str, ledger: Optional[str] = None, report: Optional[str] = None,
           config: Optional[str] = None, limits: Optional[dict] = None,
           hashing: Optional[Future] = None) -> Verification:
    """Whether the bytes of ``artefact`` passed, by ``ledger`` (a URL) or ``report`` (a
    parity report's JSON file), under the gate's limits (``config``'s ``thresholds`` table
    and ``limits``, threshold name -> value, over the defaults). An artefact, ledger or
    report that cannot be read: ``UsageError`` (exit 2). ``hashing``: the future of
    ``amptool.artefact.files.hashed_files(artefact)`` when a caller started it (the command
    line does, before it imports this module); else it starts here, while the ledger or
    report is read."""
    if (ledger is None) == (report is None):
        raise UsageError("verify needs one source: --ledger URL or --report parity.json",
                         "name the ledger the checks were recorded in, or their report")
    gate = Gate.from_file(config, limits)
    with ThreadPoolExecutor(max_workers=1) as pool:  # the bytes hashed while the rest loads
        hashing = hashing or pool.submit(hashed_files, artefact)
        unhashed = 0
        if ledger is not None:
            with open_ledger(ledger) as book:
                files = hashing.result()
                same = book.records(RecordFilter(sha256=files[0]["sha256"]))
                source = book.name
        else:
            same, unhashed = report_records(str(report))
            files, source = hashing.result(), str(report)
    main, weights = files[0]["sha256"], tuple(sorted(f["sha256"] for f in files[1:]))
    found = [r for r in same if r.sha256 == main and r.weights == weights]
    answer = decide(found, gate, any(r.sha256 == main for r in same))
    if not same and unhashed:
        answer = (NEVER, f"never tested: {report} records no sha256 of its {unhashed} "
                         "candidate(s) (written by an older amptool)", None)
    line = f"{artefact}: {answer[1]}"
    return Verification(artefact, answer[0] == PASSED, answer[0], line, source, files,
                        answer[2], len(found))


def decide(found: List[LedgerRecord], gate: Gate, other_weights: bool = False) -> tuple:
    """(reason, why, the record it rests on) of the records of one artefact's bytes, oldest
    first."""
    if not found:
        extra = ": its graph was checked, with other weight files" if other_weights else ""
        return NEVER, f"never tested: no check of these bytes was recorded{extra}", None
    qualified = [r for r in found if r.passed and gate.looser(r) is None]
    if not qualified:
        passes = [r for r in found if r.passed]
        if passes:
            rec = passes[-1]
            return LOOSER, (f"passed only under looser limits: {_name(rec)} held "
                            f"{gate.looser(rec)}"), rec
        rec = found[-1]
        return FAILED, f"failed: {_name(rec)} failed parity ({rec.failure()})", rec
    last = qualified[-1]
    later = [r for r in found if (r.id or 0) > (last.id or 0) and not r.passed]
    if later:
        rec = later[-1]
        return LATER, (f"a later failure: {_name(rec)} failed parity after "
                       f"{_name(last)} passed ({rec.failure()})"), rec
    samples = f" on {last.samples} samples" if last.samples else ""
    return PASSED, (f"verified: {_name(last)} passed parity{samples} under limits no "
                    "looser than the gate's, and no later check failed"), last


def _name(rec: LedgerRecord) -> str:
    """``record #12 (a1b2c3d4e5, 2026-01-02 03:04:05)``; a report's candidate by its path."""
    if not rec.recorded_at:
        return f"the report's check of {rec.artefact}"
    parts = ([rec.where] if rec.commit or rec.label else []) + [
        rec.recorded_at[:19].replace("T", " ")]
    return f"record #{rec.id} ({', '.join(parts)})"


def report_records(path: str) -> tuple:
    """(the candidates of the parity report at ``path`` that record their files, as records;
    how many do not: a report written before it did proves nothing of any bytes)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        json.loads(text)
    except (OSError, ValueError) as exc:
        raise UsageError(f"parity report {path} cannot be read ({exc})",
                         "give the file amptool parity --json-out wrote") from None
    report = read_document(PARITY_REPORT, text, path)
    kept = [c for c in report.candidates if c.files]
    context = RecordContext("", "", None, None, None, None)
    records = records_from_report(replace(report, candidates=kept), context)
    return ([replace(r, id=i) for i, r in enumerate(records, 1)],
            len(report.candidates) - len(kept))
