"""Parity reports: the typed report, a readable table, JSON, JUnit XML (for CI systems) and
a failure line."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional
from xml.etree import ElementTree as ET

from amptool.fileio import jsonable, write_json, write_text

INFO_METRICS = ("max_abs", "max_abs_scaled", "p999_abs_scaled", "ref_absmax", "max_rel",
                "mean_abs", "rmse", "cosine", "rel_l2", "outside_frac", "nonfinite", "top1_agree",
                "top1_agree_clear", "near_tie_flips", "tie_tol", "ref_acc", "cand_acc",
                "acc_drop", "acc_drop_clear", "counted", "task_ref", "task_cand", "task_drop")
CI_SUFFIX = "_ci"
"""A metric's 95 % interval is reported beside it (``<metric>_ci``), not as a row."""


@dataclass(frozen=True)
class CandidateVerdict:
    """One candidate's verdict and the figures of every output it was judged on."""

    path: str
    passed: bool
    caveat: Optional[str]
    """Why the verdict says nothing of fp16 safety (fp16 not exercised), or None."""
    culprit: Optional[dict]
    """The most specific explanation of a failure (kind, where, message, fix), or None."""
    metrics: dict
    """The first output's metrics (cosine, max_abs, ref_acc, cand_acc, ...)."""
    deployment: Optional[dict] = None
    """An fp16 candidate's deployment settings and the emulation without them (kept_fp32,
    settings, emulated, depends, message); None for other candidates."""
    warnings: tuple = ()
    """Lines saying a limit cannot be resolved by the samples counted (and the fix)."""
    logits_accuracy: Optional[float] = None
    """``cand_acc`` of the first output that has one (a detector's class logits are its
    second output)."""
    outputs: tuple = ()
    """Every output as judged: ``{name, passed, metrics, breaches}`` (``breaches``: the
    failed checks, as ``metric value (limit ...)`` texts)."""

    def _all_metrics(self) -> list:
        return [o["metrics"] for o in self.outputs] or [self.metrics]

    @property
    def drop(self) -> Optional[dict]:
        """The checked accuracy drop with its 95 % interval and sample count, else the
        top-1 agreement's, of the first output that has one (None without class logits)."""
        for name in ("acc_drop_clear", "top1_agree_clear"):
            for m in self._all_metrics():
                if name in m:
                    return {"metric": name, "value": m[name], "ci": m.get(name + CI_SUFFIX),
                            "samples": m.get("counted")}
        return None

    @property
    def accuracy(self) -> Optional[float]:
        """The candidate's top-1 accuracy on the labels (None without labels or logits)."""
        return self.metrics.get("cand_acc", self.logits_accuracy)

    @property
    def cosine(self) -> Optional[float]:
        """The lowest cosine over the outputs (NaN where an output holds NaN/Inf)."""
        from amptool.judge import lowest_cosine

        return lowest_cosine([m.get("cosine") for m in self._all_metrics()])

    @property
    def max_abs(self) -> Optional[float]:
        """The largest absolute error over the outputs."""
        values = [m["max_abs"] for m in self._all_metrics() if m.get("max_abs") is not None]
        return max(values) if values else None

    @property
    def failed_outputs(self) -> list:
        """``(name, breaches)`` of each output that failed its checks."""
        return [(o["name"], list(o["breaches"])) for o in self.outputs if not o["passed"]]


@dataclass
class ParityReport:
    """A parity verdict: ``passed`` and one entry per candidate, with every metric."""

    passed: bool
    reference: dict
    candidates: list
    inputs: dict
    report: dict = field(repr=False, default_factory=dict)
    """The whole report, as ``amptool parity --json-out`` writes it."""

    @classmethod
    def from_dict(cls, report: dict) -> "ParityReport":
        return cls(report["passed"], report["reference"], report["candidates"],
                   report["inputs"], report)

    def to_dict(self) -> dict:
        return dict(self.report)

    @property
    def samples(self) -> int:
        """Inputs every candidate was judged on."""
        return self.inputs["samples"]

    @property
    def reference_accuracy(self) -> Optional[float]:
        """The reference's top-1 accuracy on the labels (None without labels or candidates)."""
        return next((o["metrics"]["ref_acc"] for c in self.candidates for o in c["outputs"]
                     if o["metrics"].get("ref_acc") is not None), None)

    def verdict(self, path: str) -> Optional[CandidateVerdict]:
        """The verdict on the candidate at ``path`` (None: no such candidate)."""
        cand = next((c for c in self.candidates if c["path"] == path), None)
        if cand is None:
            return None
        return CandidateVerdict(cand["path"], cand["passed"], cand.get("caveat"),
                                cand.get("culprit"), cand["outputs"][0]["metrics"],
                                cand.get("deployment"),
                                tuple(finding_text(f) for f in cand.get("findings", [])
                                      if f["kind"] == "under_resolved"),
                                next((o["metrics"]["cand_acc"] for o in cand["outputs"]
                                      if o["metrics"].get("cand_acc") is not None), None),
                                tuple({"name": o["name"], "passed": o["passed"],
                                       "metrics": o["metrics"], "breaches": breaches(o)}
                                      for o in cand["outputs"]))

    def culprits(self) -> list:
        """Each failed candidate's culprit, with the candidate's path as ``artefact``."""
        return [dict(c["culprit"], artefact=c["path"]) for c in self.candidates
                if c.get("culprit")]


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.7g}"
    return str(value)


def checked_groups(cand: dict) -> list:
    """The outputs of a candidate, then its task metric (each: name, metrics, checks)."""
    return list(cand["outputs"]) + ([cand["task"]] if cand.get("task") else [])


def verdict_of(row: dict) -> str:
    """pass, FAIL, or n/a for a limit that does not apply to the output."""
    return "n/a" if row["passed"] is None else "pass" if row["passed"] else "FAIL"


def _metric_lines(output: dict) -> list:
    checks = {row["metric"]: row for row in output["checks"]}
    lines = [f"    {'output':<10} {'metric':<16} {'value':>12}  {'threshold':<13} result"]
    names = [n for n in INFO_METRICS if n in output["metrics"] or n in checks]
    for name in names + [n for n in output["metrics"] if n not in names]:
        if name.endswith(CI_SUFFIX):
            continue
        row = checks.get(name)
        limit = row["limit"] if row else "-"
        verdict = verdict_of(row) if row else "info"
        if row and row["passed"] is None:
            verdict += f" ({row['note']})"
        ci = output["metrics"].get(name + CI_SUFFIX)
        if ci:
            verdict += f" [95% CI {fmt_ci(ci)}]"
        lines.append(f"    {output['name'][:10]:<10} {name:<16} "
                     f"{fmt(output['metrics'].get(name)):>12}  {limit:<13} {verdict}")
    return lines


def finding_text(finding: dict) -> str:
    """A finding's message; with its fix where the finding is about the gate itself."""
    if finding["kind"] == "under_resolved":
        return f"{finding['message']}; {finding['fix']}"
    return finding["message"]


def fmt_ci(ci) -> str:
    return f"{ci[0]:.4g}..{ci[1]:.4g}"


def layer_lines(layer: dict) -> list:
    lines = [f"  per-layer ({layer['samples']} samples, {layer['policy']} vs fp32, cell cosine "
             f">= {layer['min_cosine']}):",
             f"    {'#':>3} {'cell':<28} {'type':<14} {'dtype':<8} {'cosine':>10} "
             f"{'rel_l2':>10}  note"]
    first = layer["first_flagged"]
    for i, row in enumerate(layer["rows"]):
        note = ""
        if row["path"] == first:
            note = f"<< first below threshold ({row['origin']})"
        elif row["flagged"]:
            note = "below"
        if row.get("fp16_risk") == "overflow":
            note = f"{note}; fp32 reaches {row['ref_absmax']:.4g}".lstrip("; ")
        elif row.get("fp16_risk") == "subnormal":
            note = f"{note}; {row['subnormal']:.0%} fp16-subnormal".lstrip("; ")
        lines.append(f"    {i:>3} {row['path'][:28]:<28} {row['type'][:14]:<14}"
                     f" {row['dtype'][:8]:<8}"
                     f" {fmt(row['cosine']):>10} {fmt(row.get('rel_l2')):>10}  {note}".rstrip())
    if first is None:
        lines.append("    no cell below threshold")
    return lines


def deployment_lines(entry: Optional[dict]) -> list:
    """An fp16 candidate's deployment settings and how it fares without them."""
    if not entry:
        return []
    settings = entry.get("settings") or {}
    lines = []
    if settings.get("needed"):
        names = ", ".join(f["name"] for f in settings.get("files", []))
        lines.append(f"  deployment settings: {names} keep the fp32 cells in fp32 on Ascend")
    elif entry.get("kept_fp32"):
        lines.append("  deployment settings: none recorded beside this artefact (exported "
                     "before amptool wrote them): export it again")
    if entry.get("message"):
        lines.append(f"  deployment: {entry['message']}"
                     + (" (informational)" if entry.get("emulated") else ""))
    return lines


def format_table(report: dict) -> str:
    ref = report["reference"]
    lines = [f"reference  {ref['path']} ({ref['format']} {ref['precision'] or '?'})",
             f"inputs     {report['inputs']['description']}"
             + ("" if report["inputs"]["labels"] else ", no labels")]
    for cand in report["candidates"]:
        lines.append("")
        lines.append(f"candidate  {cand['path']} ({cand['format']} {cand['precision'] or '?'}): "
                     f"{'PASS' if cand['passed'] else 'FAIL'}"
                     + (" (fp16 not exercised: see note)" if cand.get("caveat") else ""))
        for group in checked_groups(cand):
            lines.extend(_metric_lines(group))
        for finding in cand["findings"]:
            lines.append(f"  note: {finding_text(finding)}")
        lines.extend(deployment_lines(cand.get("deployment")))
        weights = cand.get("weights")
        if weights is not None and weights["reference"] == weights["candidate"]:
            lines.append(f"  weights: not compared (both sides use {weights['candidate']})")
        elif weights is not None:
            bad = weights["mismatched"]
            lines.append(f"  weights: {len(bad)} parameter(s) differ from the reference's"
                         + (": " + ", ".join(f"{b['name']} ({b['mismatched']}/{b['size']})"
                                             for b in bad[:5]) if bad else ""))
        if cand.get("per_layer"):
            lines.extend(layer_lines(cand["per_layer"]))
        if cand.get("culprit"):
            lines.append(f"  culprit: {cand['culprit']['message']}")
            if cand["culprit"].get("fix"):
                lines.append(f"  fix: {cand['culprit']['fix']}")
    lines.append("")
    lines.append(f"parity {'PASSED' if report['passed'] else 'FAILED'} "
                 f"({sum(c['passed'] for c in report['candidates'])}/{len(report['candidates'])}"
                 f" candidates, {report['seconds']:.2f} s)")
    return "\n".join(lines)


def resolution_warnings(report: dict) -> list:
    """One line per limit the samples counted cannot resolve (printed even with -q)."""
    return [f"warning: {_base(c['path'])}: {finding_text(f)}" for c in report["candidates"]
            for f in c["findings"] if f["kind"] == "under_resolved"]


def failure_fix(report: dict) -> str:
    fixes = [c["culprit"]["fix"] for c in report["candidates"]
             if not c["passed"] and c.get("culprit") and c["culprit"].get("fix")]
    return fixes[0] if fixes else "see the table above (add --per-layer to localize)"


def failure_line(report: dict) -> str:
    """One line for stderr naming each failed candidate, its breaches and its culprit."""
    parts = []
    for cand in report["candidates"]:
        if cand["passed"]:
            continue
        named = len(cand["outputs"]) > 1  # which output breached, where there are several
        found = [f"{o['name']} {b}" if named else b for o in cand["outputs"] for b in breaches(o)]
        task = breaches(cand["task"]) if cand.get("task") else []
        text = f"{_base(cand['path'])}: " + ", ".join(task + found[:3])
        if cand.get("culprit"):
            text += f"; culprit: {cand['culprit']['message']}"
        degenerate = [f["message"] for f in cand["findings"] if f["kind"] == "degenerate_reference"]
        if degenerate:
            text += f"; note: {degenerate[0]}"
        luck = [f for f in cand["findings"] if f["kind"] == "under_resolved"]
        if luck:
            text += f"; note: {luck[0]['message']} ({luck[0]['fix']})"
        parts.append(text)
    return "parity failed for " + " | ".join(parts)


def breaches(group: dict) -> list:
    """The failed checks of one output (or the task metric) as ``metric value (limit ...)``."""
    return [f"{r['metric']} {fmt(r['value'])} (limit {r['limit']})" for r in group["checks"]
            if r["passed"] is False]


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def write_report_json(path: str, report: dict) -> None:
    write_json(path, jsonable(report))


def junit_xml(report: dict) -> str:
    """One testsuite per candidate, one testcase per checked metric of each output (and of
    the task metric); a limit that does not apply to an output is a skipped testcase."""
    suites = ET.Element("testsuites", name="amptool parity")
    total = failures = 0
    for cand in report["candidates"]:
        cases = [(o, r) for o in checked_groups(cand) for r in o["checks"]]
        bad = sum(r["passed"] is False for _, r in cases)
        suite = ET.SubElement(suites, "testsuite", name=f"parity {_base(cand['path'])}",
                              tests=str(len(cases)), failures=str(bad), errors="0",
                              skipped=str(sum(r["passed"] is None for _, r in cases)),
                              time=f"{report['seconds']:.3f}")
        _junit_properties(suite, cand, report)
        for output, row in cases:
            _junit_case(suite, cand, output, row)
        total += len(cases)
        failures += bad
    suites.set("tests", str(total))
    suites.set("failures", str(failures))
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _junit_properties(suite, cand: dict, report: dict) -> None:
    props = ET.SubElement(suite, "properties")
    for key in ("path", "format", "precision"):
        ET.SubElement(props, "property", name=key, value=str(cand[key]))
    ET.SubElement(props, "property", name="reference", value=report["reference"]["path"])
    if cand.get("fp16_faithful") is not None:
        ET.SubElement(props, "property", name="fp16_faithful",
                      value=str(cand["fp16_faithful"]).lower())
    deployment = cand.get("deployment") or {}
    if deployment.get("depends") is not None:
        ET.SubElement(props, "property", name="depends_on_kept_fp32_cells",
                      value=str(deployment["depends"]).lower())
    notes = [finding_text(f) for f in cand.get("findings", [])]
    if deployment.get("emulated"):
        notes.append(deployment["message"])
    if notes:
        ET.SubElement(suite, "system-out").text = "\n".join(notes)


def _junit_case(suite, cand: dict, output: dict, row: dict) -> None:
    name = f"{output['name']}.{row['metric']}"
    if cand.get("caveat"):
        name += " [fp16 not exercised]"
    case = ET.SubElement(suite, "testcase", classname=f"parity.{_base(cand['path'])}",
                         name=name, time="0")
    if row["passed"] is None:
        ET.SubElement(case, "skipped", message=f"n/a: {row['note']}")
    elif not row["passed"]:
        msg = f"{row['metric']} = {fmt(row['value'])}, limit {row['limit']}"
        if cand.get("culprit"):
            msg += f"; culprit: {cand['culprit']['message']}"
        ET.SubElement(case, "failure", message=msg, type="ParityBreach").text = msg


def write_junit(path: str, report: dict) -> None:
    write_text(path, junit_xml(report))
