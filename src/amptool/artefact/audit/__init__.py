"""The static precision audit of an exported graph (MindIR or ONNX), read without running it.

``audit_artefact(path) -> AuditReport`` compares each compute node's dtype with the policy
the artefact was built under (cells kept in fp32 compute in fp32, the others in fp16), and
checks the stored weights' dtypes, the graph's input and output dtypes, and its Casts (those
that do nothing or round-trip). The policy comes from the provenance inside the file, else
from the manifest beside it; a foreign artefact with neither gets the checks that need no
policy. ``rules`` says what each finding means; ``mindir`` and ``onnx`` read a file into the
``DtypeGraph`` (``graph``) the rules check.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from amptool.artefact.files import locate
from amptool.artefact.provenance import read_provenance
from amptool.documents.manifest import Manifest, read_manifest
from amptool.errors import UsageError

from . import mindir, onnx
from .rules import ERRORS, NOTES, AuditPolicy, Finding, check

__all__ = ["AuditPolicy", "AuditReport", "Finding", "ERRORS", "NOTES", "audit_artefact",
           "policy_from_provenance", "policy_from_manifest"]


@dataclass(frozen=True)
class AuditReport:
    """What the audit found in one artefact."""

    path: str
    """The graph file audited."""
    format: str
    """MINDIR or ONNX."""
    policy: Optional[AuditPolicy]
    """The policy the graph was compared with; None when the artefact declares none."""
    source: Optional[str]
    """Where the policy came from: provenance, manifest or given; None without one."""
    nodes: int
    """Nodes in the graph."""
    findings: List[Finding] = field(default_factory=list)
    """Errors and notes, in the graph's order (weights and I/O last)."""
    seconds: float = 0.0
    """Time the audit took."""

    @property
    def errors(self) -> List[Finding]:
        """The errors, a contradiction of the policy first (then a node whose dtype does
        not follow from its inputs)."""
        return sorted((f for f in self.findings if f.error), key=lambda f: ERRORS.index(f.kind))

    @property
    def notes(self) -> List[Finding]:
        return [f for f in self.findings if not f.error]

    @property
    def passed(self) -> bool:
        """No error: the graph computes as its policy says (or, without a policy, as its own
        dtypes say)."""
        return not self.errors

    def summary(self) -> str:
        """One line: what was compared and the count of errors and notes."""
        return AuditReport.summary_of(self.to_dict())

    @staticmethod
    def summary_of(report: dict) -> str:
        """``summary()`` of a report as ``to_dict`` writes it."""
        against = (f"the policy in its {report['source']}" if report["policy"] is not None
                   else "no policy (none declared: dtypes checked for consistency only)")
        head = f"precision audit: {report['nodes']} nodes against {against}: "
        if not report["findings"]:
            return head + "no findings"
        return head + f"{report['errors']} error(s), {report['notes']} note(s)"

    def to_dict(self) -> dict:
        return {"path": self.path, "format": self.format, "source": self.source,
                "policy": None if self.policy is None else {
                    "precision": self.policy.precision, "io_dtype": self.policy.io_dtype,
                    "kept_fp32": list(self.policy.kept)},
                "nodes": self.nodes, "passed": self.passed,
                "errors": len(self.errors), "notes": len(self.notes),
                "findings": [{"kind": f.kind, "severity": "error" if f.error else "note",
                              "node": f.node, "cell": f.cell, "text": f.text}
                             for f in self.findings],
                "seconds": round(self.seconds, 4)}


def policy_from_provenance(provenance) -> AuditPolicy:
    """The policy a ``Provenance`` declares."""
    return AuditPolicy(provenance.precision, provenance.io_dtype,
                       tuple(provenance.kept_paths()))


def policy_from_manifest(manifest: Optional[Manifest]) -> Optional[AuditPolicy]:
    """The policy a manifest declares; None without one, or when it is an fp16 artefact's
    that does not list its kept cells (written before the manifest did)."""
    if manifest is None:
        return None
    deployment = manifest.deployment
    if manifest.precision == "fp16" and deployment is None:
        return None
    kept = tuple(c.path for c in (deployment.kept_fp32 if deployment else []))
    return AuditPolicy(manifest.precision, manifest.io_dtype or "fp32", kept)


def audit_artefact(path, key: Optional[bytes] = None,
                   policy: Optional[AuditPolicy] = None) -> AuditReport:
    """Audit the MindIR or ONNX file at ``path`` (``key``: an encrypted MindIR's) against
    ``policy``, or the one its provenance (else its manifest) declares."""
    started = time.perf_counter()
    path = locate(path)
    suffix = Path(path).suffix.lower()
    if suffix not in (".mindir", ".onnx"):
        raise UsageError(f"{path}: the precision audit reads .mindir and .onnx files",
                         "give a .mindir or .onnx file")
    source = "given" if policy is not None else None
    if policy is None:
        policy, source = _declared(path, key)
    if suffix == ".mindir":
        graph = mindir.read(path, key, wrapped=source is not None)
    else:
        graph = onnx.read(path, wrapped=source is not None)
    findings = check(graph, policy)
    return AuditReport(str(path), graph.format, policy, source, len(graph.nodes), findings,
                       time.perf_counter() - started)


def _declared(path: Path, key: Optional[bytes]) -> tuple:
    """(policy, its source) of the artefact at ``path``: its provenance, else its manifest."""
    provenance = read_provenance(path, key)
    if provenance is not None:
        return policy_from_provenance(provenance), "provenance"
    policy = policy_from_manifest(read_manifest(path))
    return policy, ("manifest" if policy is not None else None)
