"""``inspect_artefact``: the facts of any MindIR or ONNX file, read from the file itself.

Where a manifest sits beside the file it is shown too, and checked against the file
(size and sha256).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

from amptool.artefact.audit import AuditReport, audit_artefact
from amptool.artefact.files import check_files, file_facts, locate
from amptool.artefact.provenance import NO_PROVENANCE, read_provenance
from amptool.artefact.readers import reader
from amptool.artefact.runners import artefact_format, infer_precision
from amptool.documents.door import to_json
from amptool.documents.manifest import Manifest, manifest_path, read_manifest, summarize_params
from amptool.errors import UsageError
from amptool.files.fileio import sha256
from amptool.runtime.device import import_mindspore

from .deploy import summary_line


def inspect_artefact(path, key: bytes | None = None) -> dict:
    """Format, size, sha256, encryption, inputs, outputs and parameters; plus the manifest."""
    path = locate(path)
    fmt = artefact_format(path)
    if not path.is_file():
        raise UsageError(f"{path} does not exist", "check the path")
    if fmt == "AIR":
        reader("AIR").describe(path)
    if fmt == "MINDIR":
        import_mindspore()
    module = reader(fmt)
    encrypted = module.is_encrypted(path)
    manifest = read_manifest(path)
    files = file_facts(path)
    facts = {"format": fmt, "path": str(path), "file_size": files[0]["size"],
             "sha256": files[0]["sha256"], "files": files,
             "total_size": sum(f["size"] for f in files), "encrypted": encrypted}
    if encrypted and key is None:
        facts.update(readable=False, inputs=None, outputs=None, params=None, precision=None)
    else:
        described = module.describe(path, key)
        facts.update(readable=True, inputs=described["inputs"], outputs=described["outputs"],
                     params=summarize_params(described["weights"]),
                     precision=infer_precision(described), producer=described.get("producer"))
        if "opset" in described:
            facts["opset"] = described["opset"]
    facts.update(_provenance_and_audit(path, fmt, key, facts["readable"]))
    # the manifest as its file holds it (one written before a key existed lacks that key)
    facts["manifest"] = json.loads(manifest_path(path).read_text(encoding="utf-8")) \
        if manifest else None
    facts["manifest_differences"] = check_files(path, manifest, files)
    facts["manifest_matches"] = _matches(facts, manifest)
    facts["deployment"] = check_settings(path, manifest)
    return facts


def _provenance_and_audit(path: Path, fmt: str, key: bytes | None, readable: bool) -> dict:
    """``provenance`` (the document inside the file, or None) and ``audit`` (the precision
    audit's report, or None where the contents cannot be read)."""
    if fmt not in ("MINDIR", "ONNX") or not readable:
        return {"provenance": None, "audit": None}
    provenance = read_provenance(path, key)
    return {"provenance": None if provenance is None else dataclasses.asdict(provenance),
            "audit": audit_artefact(path, key).to_dict()}


def provenance_lines(facts: dict) -> list:
    """The provenance inside the file, for ``inspect``: a line of what it is and where it
    came from, one of its policy, one of its inputs' preprocessing."""
    p = facts.get("provenance")
    if p is None:
        return [f"  {NO_PROVENANCE}"] if facts.get("readable") else []
    run = f"run {p['run']['path']}, " if p.get("run") else ""
    ckpt = p["checkpoint"]
    policy = p["policy"]
    kept = ", ".join(c["path"] or "(the network)" for c in p["kept_fp32"]) or "none"
    prep = p.get("preprocess")
    lines = [f"  provenance: {p['precision']} (io {p['io_dtype']}) {p['model']}, written by "
             f"amptool {p['amptool_version']} with MindSpore {p['mindspore_version']} on "
             f"{p['created']}",
             f"    from {run}checkpoint {ckpt['name']} (sha256 {ckpt['sha256'][:16]}…)",
             f"    policy {policy['level']} ({policy['dtype']}), kept in fp32: {kept}",
             "    preprocessing: " + (f"{prep['channels']}x{prep['height']}x{prep['width']}, "
                                      f"(x - {prep['mean']:.6g}) / {prep['std']:.6g}"
                                      if prep else "none recorded")]
    return lines


def audit_lines(facts: dict, limit: int = 10) -> list:
    """The precision audit, for ``inspect``: its summary line, then a line a finding."""
    report = facts.get("audit")
    if report is None:
        return []
    head = AuditReport.summary_of(report)
    rows = [f"    {'ERROR' if f['severity'] == 'error' else 'note'}: {f['text']}"
            for f in report["findings"][:limit]]
    if len(report["findings"]) > limit:
        rows.append(f"    … {len(report['findings']) - limit} more (--json lists them all)")
    return [f"  {head}"] + rows


def check_settings(path: Path, manifest: Optional[Manifest]) -> dict | None:
    """The manifest's deployment section with each settings file checked beside ``path``:
    ``present`` and ``matches`` (its sha256 is the manifest's) per file; None without a
    manifest."""
    if manifest is None:
        return None
    if manifest.deployment is None:
        return {}
    files = []
    for item in manifest.deployment.files:
        found = path.with_name(item.name)
        present = found.is_file()
        files.append({**to_json(item), "present": present,
                      "matches": present and sha256(found) == item.sha256})
    return {**to_json(manifest.deployment), "files": files}


def settings_broken(checked: dict | None) -> list:
    """Names of the settings files ``check_settings`` found missing or changed."""
    return [f["name"] for f in (checked or {}).get("files", []) if not f.get("matches", True)]


def deployment_line(path: str, manifest: Manifest, checked: dict | None) -> str:
    """The deployment settings of an artefact (``check_settings``), for ``inspect``."""
    line = summary_line(manifest.deployment)
    bad = settings_broken(checked)
    if bad:
        line += f"; MISSING OR CHANGED: {', '.join(bad)} (re-export {Path(path).name})"
    return line


def _matches(facts: dict, manifest: Optional[Manifest]) -> bool | None:
    if manifest is None:
        return None
    same = not facts["manifest_differences"]
    if facts.get("params") is not None:
        same = same and manifest.params.bytes == facts["params"]["bytes"]
    return same


def _declared_names(facts: dict, manifest: Manifest) -> list:
    """The signature's input names from a manifest that matches the file (MindIR keeps
    none), one per input of the file; empty otherwise."""
    inputs = manifest.model.inputs or []
    if not facts.get("manifest_matches") or len(inputs) != len(facts.get("inputs") or []):
        return []
    return [i.name for i in inputs]


def format_report(facts: dict) -> list:
    """Human-readable lines."""
    manifest = read_manifest(facts["path"])
    lines = [f"{facts['path']}: {facts['format']}, {facts['file_size']:,} bytes, "
             f"sha256 {facts['sha256'][:16]}…" + (", encrypted" if facts["encrypted"] else "")]
    if len(facts["files"]) > 1:
        lines.append(f"  weights apart: {len(facts['files']) - 1} file(s) beside it ("
                     + ", ".join(f["path"] for f in facts["files"][1:4])
                     + (", …" if len(facts["files"]) > 4 else "")
                     + f"), {facts['total_size']:,} bytes in all")
    if not facts["readable"]:
        lines.append("  contents: encrypted (pass --key-file or --key-env to read them)")
    else:
        if facts.get("producer"):
            lines.append(f"  producer: {facts['producer']}"
                         + (f", opset {facts['opset']}" if facts.get("opset") else ""))
        declared = _declared_names(facts, manifest) if manifest else []
        for kind in ("inputs", "outputs"):
            for i, io in enumerate(facts[kind]):
                shape = "x".join("N" if d == -1 else str(d) for d in io["shape"])
                name = io["name"]
                if kind == "inputs" and declared and declared[i] != name:
                    name = f"{name} ({declared[i]})"
                lines.append(f"  {kind[:-1]:<6} {name}: {io['dtype']} [{shape}]")
        p = facts["params"]
        dtypes = ", ".join(f"{k} {v:,}" for k, v in p["dtypes"].items())
        lines.append(f"  params: {p['count']:,} in {p['tensors']} tensors, {p['bytes']:,} bytes"
                     f" ({dtypes}); precision {facts['precision'] or 'mixed'}")
    lines += provenance_lines(facts) + audit_lines(facts)
    m = manifest
    if m is None:
        lines.append("  manifest: none")
    else:
        lines.append(f"  manifest: {m.precision} from {m.model.spec}, "
                     f"policy {m.policy.level}, MindSpore {m.mindspore_version}, "
                     f"created {m.created}; "
                     + ("matches the file" if facts["manifest_matches"] else
                        "DOES NOT MATCH the file (re-export it)"
                        + (f": {'; '.join(facts['manifest_differences'][:3])}"
                           if facts.get("manifest_differences") else "")))
        lines.append(f"  {deployment_line(facts['path'], m, facts.get('deployment'))}")
    return lines
