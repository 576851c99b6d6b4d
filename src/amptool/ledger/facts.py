"""What an artefact says of itself for its ledger record: model, precision, policy and the
cells kept in fp32, and where that came from.

The sources, first found first: the provenance amptool writes inside the artefact (it
survives a copy without the manifest; read through ``amptool.artefact.provenance`` where that
module is present), else the manifest beside the artefact, else only what the parity report
knows (``facts_from`` is then ``report``).
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from amptool.documents.manifest import read_manifest
from amptool.errors import UsageError

PROVENANCE_MODULE = "amptool.artefact.provenance"
"""The module that reads the provenance inside an artefact (``read_provenance(path)``: a
mapping or a dataclass with ``model``, ``precision``, ``policy`` and ``kept_cells``, or
None for an artefact without)."""


@dataclass(frozen=True)
class ArtefactFacts:
    """What an artefact records of where it came from."""

    model: Optional[str] = None
    """The model reference (sample name, file.py:factory, package.module:factory)."""
    precision: Optional[str] = None
    """fp32 or fp16."""
    policy: Optional[dict] = None
    """The precision policy its graph was built with."""
    kept_cells: Optional[list] = None
    """The cells it keeps in fp32 (paths)."""
    source: str = "report"
    """provenance, manifest, or report (neither was found)."""


def artefact_facts(path: str) -> ArtefactFacts:
    """The facts of the artefact at ``path``: from its provenance, else its manifest, else
    none (``source`` says which)."""
    found = _from_provenance(path)
    if found is not None:
        return found
    try:
        manifest = read_manifest(path) if Path(path).is_file() else None
    except UsageError:  # an unreadable manifest records nothing
        manifest = None
    if not manifest:
        return ArtefactFacts()
    model = manifest.get("model") or {}
    policy = manifest.get("policy")
    kept = [c.get("path") for c in (manifest.get("deployment") or {}).get("kept_fp32") or []]
    if not kept and policy:
        kept = list(policy.get("fp32_cells") or [])
    return ArtefactFacts(model=model.get("spec") or model.get("name"),
                         precision=manifest.get("precision"), policy=policy,
                         kept_cells=kept, source="manifest")


def _from_provenance(path: str) -> Optional[ArtefactFacts]:
    """The facts the artefact's own provenance holds (None: no provenance reader here, or
    none in the file)."""
    try:
        module = importlib.import_module(PROVENANCE_MODULE)
        read = getattr(module, "read_provenance")
    except (ImportError, AttributeError):
        return None
    try:
        found = read(path)
    except (OSError, ValueError, UsageError):
        return None
    if found is None:
        return None
    facts = _as_mapping(found)
    kept = facts.get("kept_cells", facts.get("kept_fp32"))
    model = facts.get("model")
    if isinstance(model, dict):
        model = model.get("spec") or model.get("name")
    return ArtefactFacts(model=model, precision=facts.get("precision"),
                         policy=facts.get("policy"),
                         kept_cells=[k if isinstance(k, str) else _as_mapping(k).get("path")
                                     for k in kept] if kept is not None else None,
                         source="provenance")


def _as_mapping(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    to_dict = getattr(value, "to_dict", None) or getattr(value, "model_dump", None)
    return dict(to_dict()) if callable(to_dict) else {}
