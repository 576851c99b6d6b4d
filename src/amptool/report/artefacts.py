"""The provenance and precision audit of each artefact a report names, for ``report.html``:
read from the files themselves as the page is made (each file's graph, not its weights), so
the page shows what the bytes that were judged say of themselves."""
from __future__ import annotations

from typing import TYPE_CHECKING

from amptool.artefact.audit import audit_artefact
from amptool.artefact.provenance import NO_PROVENANCE, read_provenance
from amptool.errors import AmpToolError
from amptool.report import page as hp

if TYPE_CHECKING:
    from amptool.documents.parity import ParityReport


def provenance_section(report: "ParityReport", names: dict) -> str:
    """A row per MindIR or ONNX artefact (the reference first): where it came from, and its
    precision audit with its first finding; "" when the report names no such file.
    ``names``: path -> how the page names it."""
    paths = [p for p in [report.reference.path, *(c.path for c in report.candidates)]
             if p and str(p).lower().endswith((".mindir", ".onnx"))]
    if not paths:
        return ""
    rows, bad = [], []
    for path in dict.fromkeys(paths):
        origin, audit, failed = _row(path)
        rows.append([hp.Cell(f"<code>{hp.h(names.get(path, path))}</code>"), origin, audit])
        bad.append(failed)
    head = hp.note("Read from each file: the provenance amptool writes inside it, and the "
                   "static precision audit of its graph against the policy it declares "
                   "(cells kept in fp32 compute in fp32, the others in fp16; weights, inputs "
                   "and outputs in their declared dtypes; Casts that do nothing or "
                   "round-trip).")
    table = hp.table(["artefact", "provenance", "precision audit"], rows, ["path", "", ""], bad)
    return hp.section("Provenance and precision audit", [head, table], "audit")


def _row(path: str) -> tuple:
    """(provenance text, audit text, whether the audit found an error) of one artefact."""
    try:
        found = read_provenance(path)
        report = audit_artefact(path)
    except AmpToolError as exc:  # an encrypted MindIR, a file gone since
        return f"not read: {exc.problem}", "not run", False
    if found is None:
        origin = NO_PROVENANCE
    else:
        kept = ", ".join(found.kept_paths()) or "none"
        source = f"run {found.run.path}, " if found.run else ""
        origin = (f"{found.precision} {found.model} from {source}checkpoint "
                  f"{found.checkpoint.name} (sha256 {found.checkpoint.sha256[:12]}…), policy "
                  f"{found.policy.level}, kept in fp32: {kept}; amptool "
                  f"{found.amptool_version}")
    if not report.findings:
        return origin, f"no findings ({report.nodes} nodes)", False
    first = (report.errors or report.notes)[0]
    text = (f"{len(report.errors)} error(s), {len(report.notes)} note(s); "
            f"{'the first' if report.errors else 'note'}: {first.text}")
    return origin, text, bool(report.errors)
