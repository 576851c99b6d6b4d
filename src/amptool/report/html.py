"""``report.html``: one self-contained page a person can read offline (a CI artifact) for
``amptool train``, ``parity`` and ``run``.

The verdict and the line that explains it come first; then the artefacts with their
verdicts and the interval on the accuracy drop, the diff against a baseline report
(``amptool run --baseline``; ``amptool.report.diff``), the per-layer error along the depth (with
``--per-layer``), the training curves, every output's checks, the cells kept in fp32 and
the deployment settings, sizes and timings, and the environment. The page is built from
the stages' own records (parity.json's content, the run folder's run.json and
metrics.jsonl); every name in it is escaped, and it refers to nothing outside itself.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from amptool import __version__
from amptool.artefact.files import total_size
from amptool.documents.door import to_json
from amptool.documents.manifest import read_manifest
from amptool.report.artefacts import provenance_section
from amptool.files.fileio import write_text
from amptool.report import page as hp
from amptool.report.diff import diff_section
from amptool.report.layers import layer_part
from amptool.report.training import (TrainingRecord, policy_part, policy_reasons, read_training,
                                     training_cards, training_section)
from amptool.runtime.device import CPU_ISA_ENV
from amptool.stats.judge import lowest_cosine

if TYPE_CHECKING:
    from amptool.documents.diff import DiffReport
    from amptool.documents.manifest import KeptCell
    from amptool.documents.parity import CandidateResult, ParityReport

DROPS = ("acc_drop_clear", "top1_agree_clear")
"""The checked accuracy figures whose 95 % interval the artefact table shows, in order."""


@dataclass(frozen=True)
class ReportPage:
    """What one report shows."""

    command: str
    """train, parity or run."""
    passed: bool
    line: str
    """The one line that explains the verdict (parity's failure line when it failed)."""
    fix: Optional[str] = None
    run_folder: Optional[str] = None
    """A training run folder (run.json, metrics.jsonl), or None."""
    parity: Optional["ParityReport"] = None
    """The parity report, or None."""
    seconds: dict = field(default_factory=dict)
    """Stage -> wall seconds."""
    diff: Optional["DiffReport"] = None
    """The parity report compared with a baseline report, or None."""


def write_report(path, page: ReportPage) -> None:
    """Render ``page`` and write it to ``path`` all at once."""
    write_text(path, render(page))


def render(page: ReportPage) -> str:
    """The whole HTML document of ``page``."""
    rec = read_training(page.run_folder) if page.run_folder else None
    report = page.parity
    sections = []
    if report:
        sections.append(artefacts_section(report))
        sections += [diff_section(page.diff)] if page.diff is not None else []
        sections.append(provenance_section(report, labels(report)))
        layered = sorted((c for c in report.candidates if c.per_layer),
                         key=lambda c: c.passed)  # failed ones first
        if layered:
            sections.append(hp.section("Per-layer error along the depth",
                                       [layer_part(c, labels(report)[c.path])
                                        for c in layered], "per-layer"))
    if rec is not None:
        sections.append(training_section(rec))
    if report:
        sections.append(outputs_section(report))
    sections += [kept_section(rec, report), timings_section(page, rec, report),
                 environment_section(rec, report)]
    body = [_topline(page, rec), hp.verdict_banner(page.passed, page.line, page.fix),
            hp.cards(_cards(rec, report)), hp.contents(sections)] + sections
    body.append(f"<footer>Written by amptool {hp.h(_version())} on "
                f"{hp.h(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}; one file, "
                "no network needed.</footer>")
    return hp.page(f"amptool {page.command}: {'PASS' if page.passed else 'FAIL'}", body)


def _version() -> str:
    return __version__


def _topline(page: ReportPage, rec: Optional[TrainingRecord]) -> str:
    what = [f"amptool {page.command}"]
    if rec is not None:
        what.append(str((rec.info.model.spec if rec.info.model else None) or ""))
    if page.parity:
        what.append(f"reference {_base(page.parity.reference.path or 'golden outputs')}")
    return f'<div class="topline">{hp.h(" · ".join(w for w in what if w))}</div>'


def _cards(rec: Optional[TrainingRecord], report: Optional["ParityReport"]) -> list:
    items = training_cards(rec) if rec is not None else []
    if report:
        cands = report.candidates
        items += [("candidates passing", f"{sum(c.passed for c in cands)}/{len(cands)}"),
                  ("parity samples", hp.number(report.inputs.samples))]
    return items


def _base(path: str) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1]


def labels(report: "ParityReport") -> dict:
    """Path -> how the page names each artefact: its file name, or its whole path where two
    artefacts share a file name."""
    paths = [report.reference.path or "golden outputs"] + [c.path for c in report.candidates]
    names = [_base(p) for p in paths]
    return {p: n if names.count(n) == 1 else p for p, n in zip(paths, names)}


def _size(path) -> Optional[int]:
    try:
        return total_size(path) if path and Path(path).exists() else None
    except OSError:
        return None


def first_metric(cand: "CandidateResult", name: str):
    """``name`` from the first output whose metrics hold it (None when none does)."""
    return next((getattr(o.metrics, name) for o in cand.outputs
                 if getattr(o.metrics, name) is not None), None)


def drop_text(cand: "CandidateResult") -> str:
    """The checked accuracy drop (else top-1 agreement) with its 95 % interval."""
    for name in DROPS:
        value = first_metric(cand, name)
        if value is not None:
            ci = first_metric(cand, name + "_ci")
            label = "" if name.startswith("acc") else "top-1 agreement "
            return f"{label}{hp.number(value)} [{hp.ci_text(ci)}]"
    return "-"


def artefacts_section(report: "ParityReport") -> str:
    """The reference and each candidate: size, accuracy, drop with its interval, verdict."""
    ref = report.reference
    ref_size = _size(ref.path)
    ref_acc = next((first_metric(c, "ref_acc") for c in report.candidates
                    if first_metric(c, "ref_acc") is not None), None)
    named = labels(report)
    rows = [[hp.Cell(f"<code>{hp.h(named[ref.path or 'golden outputs'])}</code>"),
             ref.format, ref.precision, hp.size_text(ref_size), "-",
             hp.number(ref_acc), "-", "-", hp.Cell(hp.badge("reference", "info"))]]
    bad = [False]
    for cand in report.candidates:
        size = _size(cand.path)
        ratio = f"{size / ref_size:.3f}" if size and ref_size else "-"
        cosine = lowest_cosine([hp.as_float(o.metrics.cosine) for o in cand.outputs])
        rows.append([hp.Cell(f"<code>{hp.h(named[cand.path])}</code>"), cand.format,
                     cand.precision, hp.size_text(size), ratio,
                     hp.number(first_metric(cand, "cand_acc")), drop_text(cand),
                     hp.number(cosine, 8),
                     hp.Cell(hp.verdict_badge(cand.passed, bool(cand.caveat)))])
        bad.append(not cand.passed)
    inputs = report.inputs
    head = hp.note(f"Inputs: {inputs.description}"
                   + ("" if inputs.labels else ", no labels")
                   + ". Drop: reference accuracy minus the candidate's on the samples both "
                   "classify clearly, with its 95 % confidence interval.")
    table = hp.table(["artefact", "format", "precision", "size", "vs ref", "accuracy",
                      "accuracy drop [95% CI]", "cosine", "verdict"], rows,
                     ["path", "", "", "num", "num", "num", "num", "num", ""], bad)
    return hp.section("Artefacts and verdicts", [head, table] + _artefact_notes(report),
                      "artefacts")


def _artefact_notes(report: "ParityReport") -> list:
    """Caveats, limits the samples cannot resolve, and culprits, one note each."""
    cands = report.candidates
    notes = [hp.note(f"{_base(c.path)}: {c.caveat}", warn=True) for c in cands if c.caveat]
    notes += [hp.note(f"{_base(c.path)}: {f.message}; {f.fix}", warn=True)
              for c in cands for f in c.findings if f.kind == "under_resolved"]
    notes += [hp.note(f"culprit in {_base(c.path)}: {c.culprit.message}"
                      + (f"; fix: {c.culprit.fix}" if c.culprit.fix else ""))
              for c in cands if c.culprit]
    return notes


def outputs_section(report: "ParityReport") -> str:
    """Every check of every output of each candidate (failed candidates shown open)."""
    parts, named = [], labels(report)
    for cand in report.candidates:
        rows, bad = [], []
        for group in cand.checked_groups():
            figures = group.metrics.figures()
            for row in group.checks:
                ci = figures.get(row.metric + "_ci") or row.ci
                rows.append([group.name, row.metric, hp.number(row.value, 7), row.limit,
                             hp.ci_text(ci), hp.Cell(hp.verdict_badge(row.passed))])
                bad.append(row.passed is False)
        verdict = "PASS" if cand.passed else "FAIL"
        notes = [hp.note(f.message + (f"; {f.fix}" if f.fix else ""),
                         warn=f.kind == "under_resolved") for f in cand.findings]
        parts.append(f'<details{" open" if not cand.passed else ""}><summary>'
                     f'{hp.h(named[cand.path])} ({hp.h(cand.format)} '
                     f'{hp.h(cand.precision)}): {verdict}</summary>'
                     + hp.table(["output", "metric", "value", "limit", "95% CI", "result"],
                                rows, ["", "", "num", "", "num", ""], bad)
                     + "".join(notes) + "</details>")
    return hp.section("Checks of every output", parts, "outputs")


def kept_section(rec: Optional[TrainingRecord], report: Optional["ParityReport"]) -> str:
    """The cells kept in fp32 (and why), and each fp16 artefact's deployment settings."""
    auto = policy_reasons(rec)
    parts = []
    cands = [c for c in (report.candidates if report else []) if c.deployment]
    for cand in cands:
        parts.append(_deployment_part(cand, auto))
    if not cands and rec is not None:
        parts.append(policy_part(rec.info.policy, auto))
    if not parts:
        parts.append(hp.note("No candidate records deployment settings (fp16 candidates of "
                             "amptool's export do)."))
    return hp.section("Cells kept in fp32 and deployment settings", parts, "kept")


def kept_reason(cell: "KeptCell", policy: dict, auto: dict) -> str:
    """Why ``cell`` stays fp32 under ``policy`` (``auto``: the range pass's)."""
    path, kind = cell.path, cell.type
    if path in auto:
        return auto[path]
    if path in (policy.get("fp32_cells") or []):
        return "policy: listed in fp32_cells"
    if kind in (policy.get("fp32_types") or []):
        return f"policy: fp32_types names {kind}"
    if path == "":
        return "the whole network: every cell in it is kept"
    return (f"level {policy.get('level', '?')}: MindSpore keeps {kind} in fp32 (its black "
            "list), or every cell it holds is kept")


def _deployment_part(cand: "CandidateResult", auto: dict) -> str:
    dep = cand.deployment
    assert dep is not None  # only candidates that record deployment settings are shown
    settings = dep.settings
    try:
        manifest = read_manifest(cand.path)
        policy = to_json(manifest.policy) if manifest else {}
    except Exception:  # noqa: BLE001 - a manifest that cannot be read: no reasons shown
        policy = {}
    kept = (settings.kept_fp32 if settings else None) or dep.kept_fp32 or []
    why = settings.why if settings else None
    head = f"<h3>{hp.h(_base(cand.path))} ({hp.h(cand.precision)})</h3>"
    if not kept:
        return head + hp.note(why or dep.message or "no cell is kept in fp32")
    rows = [[hp.Cell(f"<code>{hp.h(c.path or '(network)')}</code>"), c.type,
             kept_reason(c, policy, auto)] for c in kept]
    files = ", ".join(f"<code>{hp.h(f.name)}</code>"
                      for f in (settings.files if settings else [])) or "none written"
    modes = (settings.precision_mode if settings else None) or {}
    lines = [f'<p class="note">Deploy with {files} (MindSpore Lite <code>precision_mode='
             f"{hp.h(modes.get('mindspore_lite', '-'))}</code>; ATC/ACL <code>--precision_mode="
             f"{hp.h(modes.get('acl', '-'))}</code>).</p>",
             f"<details><summary>Why these settings</summary>{hp.note(why or '')}"
             "</details>"]
    if dep.message:
        lines.append(hp.note(dep.message + (" (informational)" if dep.emulated else ""),
                             warn=bool(dep.depends)))
    return head + hp.table(["cell", "type", "why it stays fp32"], rows,
                           ["path", "", ""]) + "".join(lines)


def timings_section(page: ReportPage, rec: Optional[TrainingRecord],
                    report: Optional["ParityReport"]) -> str:
    rows = [[stage, f"{hp.as_float(s) or 0:.2f}"] for stage, s in page.seconds.items()]
    if rec is not None and rec.summary is not None:
        rows.append(["training throughput (samples/s)",
                     f"{hp.as_float(rec.summary.samples_per_s) or 0:.0f}"])
    if report and "parity" not in page.seconds and report.seconds is not None:
        rows.append(["parity", f"{hp.as_float(report.seconds) or 0:.2f}"])
    return hp.section("Sizes and timings", [
        hp.note("Artefact sizes are in the artefact table (vs ref: the candidate's size over "
                "the reference's).") if report else "",
        hp.table(["stage", "seconds"], rows, ["", "num"]) if rows
        else hp.note("No stage finished.")], "timings")


def environment_section(rec: Optional[TrainingRecord],
                        report: Optional["ParityReport"]) -> str:
    versions = dict((rec.info.versions or {}) if rec is not None else {})
    versions.setdefault("amptool", _version())
    versions.setdefault("mindspore", _installed("mindspore"))
    versions.setdefault("numpy", _installed("numpy"))
    versions.setdefault("python", platform.python_version())
    device = (rec.info.device if rec is not None else None) or \
        (report.device if report else None)
    rows = [["amptool", versions["amptool"]], ["MindSpore", versions["mindspore"]],
            ["Python", versions["python"]], ["NumPy", versions["numpy"]],
            ["device", device or "-"], ["platform", platform.platform()],
            [CPU_ISA_ENV, os.environ.get(CPU_ISA_ENV) or "unset"]]
    return hp.section("Environment", [hp.table(["", "value"], rows)], "environment")


def _installed(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"
