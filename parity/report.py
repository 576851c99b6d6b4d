"""Parity reports: the typed report, a readable table, JSON, JUnit XML (for CI systems) and
a failure line."""
from __future__ import annotations

from typing import Optional
from xml.etree import ElementTree as ET

from amptool.documents.figures import CI_SUFFIX, breaches, finding_text, fmt
from amptool.documents.layers import LayerReport
from amptool.documents.parity import (PARITY_REPORT, CandidateResult, CandidateVerdict, Check,
                                      Deployment, ParityReport, candidate_verdict)
from amptool.files.fileio import write_json, write_text

__all__ = ["CandidateVerdict", "ParityReport", "breaches", "candidate_verdict",
           "failure_fix", "failure_line", "finding_text", "fmt", "format_table",
           "junit_xml", "resolution_warnings", "write_junit", "write_report_json"]

INFO_METRICS = ("max_abs", "max_abs_scaled", "p999_abs_scaled", "ref_absmax", "max_rel",
                "mean_abs", "rmse", "cosine", "rel_l2", "outside_frac", "nonfinite", "top1_agree",
                "top1_agree_clear", "near_tie_flips", "tie_tol", "ref_acc", "cand_acc",
                "acc_drop", "acc_drop_clear", "counted", "task_ref", "task_cand", "task_drop")


def verdict_of(row: Check) -> str:
    """pass, FAIL, or n/a for a limit that does not apply to the output."""
    return "n/a" if row.passed is None else "pass" if row.passed else "FAIL"


def _metric_lines(output) -> list:
    """The table rows of one output (or the task metric): every figure, its limit and
    result."""
    checks = {row.metric: row for row in output.checks}
    figures = output.metrics.figures()
    lines = [f"    {'output':<10} {'metric':<16} {'value':>12}  {'threshold':<13} result"]
    names = [n for n in INFO_METRICS if n in figures or n in checks]
    for name in names + [n for n in figures if n not in names]:
        if name.endswith(CI_SUFFIX):
            continue
        row = checks.get(name)
        limit = row.limit if row else "-"
        verdict = verdict_of(row) if row else "info"
        if row and row.passed is None:
            verdict += f" ({row.note})"
        ci = figures.get(name + CI_SUFFIX)
        if ci:
            verdict += f" [95% CI {fmt_ci(ci)}]"
        lines.append(f"    {output.name[:10]:<10} {name:<16} "
                     f"{fmt(figures.get(name)):>12}  {limit:<13} {verdict}")
    return lines


def fmt_ci(ci) -> str:
    return f"{ci[0]:.4g}..{ci[1]:.4g}"


def layer_lines(layer: LayerReport) -> list:
    lines = [f"  per-layer ({layer.samples} samples, {layer.policy} vs fp32, cell cosine "
             f">= {layer.min_cosine}):",
             f"    {'#':>3} {'cell':<28} {'type':<14} {'dtype':<8} {'cosine':>10} "
             f"{'rel_l2':>10}  note"]
    first = layer.first_flagged
    for i, row in enumerate(layer.rows):
        note = ""
        if row.path == first:
            note = f"<< first below threshold ({row.origin})"
        elif row.flagged:
            note = "below"
        if row.fp16_risk == "overflow":
            note = f"{note}; fp32 reaches {row.ref_absmax:.4g}".lstrip("; ")
        elif row.fp16_risk == "subnormal":
            note = f"{note}; {row.subnormal:.0%} fp16-subnormal".lstrip("; ")
        lines.append(f"    {i:>3} {row.path[:28]:<28} {row.type[:14]:<14}"
                     f" {row.dtype[:8]:<8}"
                     f" {fmt(row.cosine):>10} {fmt(row.rel_l2):>10}  {note}".rstrip())
    if first is None:
        lines.append("    no cell below threshold")
    return lines


def deployment_lines(entry: Optional[Deployment]) -> list:
    """An fp16 candidate's deployment settings and how it fares without them."""
    if not entry:
        return []
    settings = entry.settings
    lines = []
    if settings and settings.needed:
        names = ", ".join(f.name for f in settings.files)
        lines.append(f"  deployment settings: {names} keep the fp32 cells in fp32 on Ascend")
    elif entry.kept_fp32:
        lines.append("  deployment settings: none recorded beside this artefact (exported "
                     "before amptool wrote them): export it again")
    if entry.message:
        lines.append(f"  deployment: {entry.message}"
                     + (" (informational)" if entry.emulated else ""))
    return lines


def format_table(report: ParityReport) -> str:
    ref = report.reference
    lines = [f"reference  {ref.path} ({ref.format} {ref.precision or '?'})",
             f"inputs     {report.inputs.description}"
             + ("" if report.inputs.labels else ", no labels")]
    for cand in report.candidates:
        lines.append("")
        lines.extend(_candidate_lines(cand))
    lines.append("")
    lines.append(f"parity {'PASSED' if report.passed else 'FAILED'} "
                 f"({sum(c.passed for c in report.candidates)}/{len(report.candidates)}"
                 f" candidates, {report.seconds:.2f} s)")
    return "\n".join(lines)


def _candidate_lines(cand: CandidateResult) -> list:
    lines = [f"candidate  {cand.path} ({cand.format} {cand.precision or '?'}): "
             f"{'PASS' if cand.passed else 'FAIL'}"
             + (" (fp16 not exercised: see note)" if cand.caveat else "")]
    for group in cand.checked_groups():
        lines.extend(_metric_lines(group))
    lines.extend(f"  note: {finding_text(finding)}" for finding in cand.findings)
    lines.extend(deployment_lines(cand.deployment))
    weights = cand.weights
    if weights is not None and weights.reference == weights.candidate:
        lines.append(f"  weights: not compared (both sides use {weights.candidate})")
    elif weights is not None:
        bad = weights.mismatched
        lines.append(f"  weights: {len(bad)} parameter(s) differ from the reference's"
                     + (": " + ", ".join(f"{b.name} ({b.mismatched}/{b.size})"
                                         for b in bad[:5]) if bad else ""))
    if cand.per_layer:
        lines.extend(layer_lines(cand.per_layer))
    if cand.culprit:
        lines.append(f"  culprit: {cand.culprit.message}")
        if cand.culprit.fix:
            lines.append(f"  fix: {cand.culprit.fix}")
    return lines


def resolution_warnings(report: ParityReport) -> list:
    """One line per limit the samples counted cannot resolve (printed even with -q)."""
    return [f"warning: {_base(c.path)}: {finding_text(f)}" for c in report.candidates
            for f in c.findings if f.kind == "under_resolved"]


def failure_fix(report: ParityReport) -> str:
    """The fix of the first failed candidate that has one: its culprit's, else what would
    let it be localized."""
    failed = [c for c in report.candidates if not c.passed]
    fixes = [c.culprit.fix for c in failed if c.culprit and c.culprit.fix]
    fixes += [f.fix for c in failed for f in c.findings if f.kind == "not_localized" and f.fix]
    if fixes:
        return fixes[0]
    if any(c.per_layer for c in failed):
        return "see the table above (per-layer: no cell diverges on the failing samples)"
    return "see the table above (add --per-layer to localize)"


def failure_line(report: ParityReport) -> str:
    """One line for stderr naming each failed candidate, its breaches and its culprit."""
    parts = []
    for cand in report.candidates:
        if cand.passed:
            continue
        named = len(cand.outputs) > 1  # which output breached, where there are several
        found = [f"{o.name} {b}" if named else b for o in cand.outputs for b in breaches(o)]
        task = breaches(cand.task) if cand.task else []
        text = f"{_base(cand.path)}: " + ", ".join(task + found[:3])
        if cand.culprit:
            text += f"; culprit: {cand.culprit.message}"
        text += "".join(f"; {f.message}" for f in cand.findings if f.kind == "not_localized")
        degenerate = [f.message for f in cand.findings if f.kind == "degenerate_reference"]
        if degenerate:
            text += f"; note: {degenerate[0]}"
        luck = [f for f in cand.findings if f.kind == "under_resolved"]
        if luck:
            text += f"; note: {luck[0].message} ({luck[0].fix})"
        parts.append(text)
    return "parity failed for " + " | ".join(parts)


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def report_json(report: ParityReport) -> dict:
    """The report as ``--json-out`` writes it and ``--json`` prints it."""
    return PARITY_REPORT.json(report)


def write_report_json(path: str, report: ParityReport) -> None:
    write_json(path, report_json(report))


def junit_xml(report: ParityReport) -> str:
    """One testsuite per candidate, one testcase per checked metric of each output (and of
    the task metric); a limit that does not apply to an output is a skipped testcase."""
    suites = ET.Element("testsuites", name="amptool parity")
    total = failures = 0
    for cand in report.candidates:
        cases = [(o, r) for o in cand.checked_groups() for r in o.checks]
        bad = sum(r.passed is False for _, r in cases)
        suite = ET.SubElement(suites, "testsuite", name=f"parity {_base(cand.path)}",
                              tests=str(len(cases)), failures=str(bad), errors="0",
                              skipped=str(sum(r.passed is None for _, r in cases)),
                              time=f"{report.seconds:.3f}")
        _junit_properties(suite, cand, report)
        for output, row in cases:
            _junit_case(suite, cand, output, row)
        total += len(cases)
        failures += bad
    suites.set("tests", str(total))
    suites.set("failures", str(failures))
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _junit_properties(suite, cand: CandidateResult, report: ParityReport) -> None:
    props = ET.SubElement(suite, "properties")
    for key in ("path", "format", "precision"):
        ET.SubElement(props, "property", name=key, value=str(getattr(cand, key)))
    ET.SubElement(props, "property", name="reference", value=report.reference.path)
    if cand.fp16_faithful is not None:
        ET.SubElement(props, "property", name="fp16_faithful",
                      value=str(cand.fp16_faithful).lower())
    deployment = cand.deployment
    if deployment and deployment.depends is not None:
        ET.SubElement(props, "property", name="depends_on_kept_fp32_cells",
                      value=str(deployment.depends).lower())
    notes = [finding_text(f) for f in cand.findings]
    if deployment and deployment.emulated and deployment.message:
        notes.append(deployment.message)
    if notes:
        ET.SubElement(suite, "system-out").text = "\n".join(notes)


def _junit_case(suite, cand: CandidateResult, output, row: Check) -> None:
    name = f"{output.name}.{row.metric}"
    if cand.caveat:
        name += " [fp16 not exercised]"
    case = ET.SubElement(suite, "testcase", classname=f"parity.{_base(cand.path)}",
                         name=name, time="0")
    if row.passed is None:
        ET.SubElement(case, "skipped", message=f"n/a: {row.note}")
    elif not row.passed:
        msg = f"{row.metric} = {fmt(row.value)}, limit {row.limit}"
        if cand.culprit:
            msg += f"; culprit: {cand.culprit.message}"
        ET.SubElement(case, "failure", message=msg, type="ParityBreach").text = msg


def write_junit(path: str, report: ParityReport) -> None:
    write_text(path, junit_xml(report))
