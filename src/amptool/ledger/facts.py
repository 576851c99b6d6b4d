"""What an artefact says of itself for its ledger record: model, precision, policy and the
cells kept in fp32, and where that came from.

The sources, first found first: the provenance amptool writes inside the artefact (it
survives a copy without the manifest: ``amptool.artefact.provenance``), else the manifest
beside the artefact, else only what the parity report knows (``facts_from`` is then
``report``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from amptool.artefact.provenance import read_provenance
from amptool.documents.door import to_json
from amptool.documents.manifest import read_manifest
from amptool.errors import UsageError


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
    if manifest is None:
        return ArtefactFacts()
    kept = [c.path for c in (manifest.deployment.kept_fp32 if manifest.deployment else [])]
    if not kept:
        kept = list(manifest.policy.fp32_cells or [])
    return ArtefactFacts(model=manifest.model.spec or manifest.model.name,
                         precision=manifest.precision, policy=to_json(manifest.policy),
                         kept_cells=kept, source="manifest")


def _from_provenance(path: str) -> Optional[ArtefactFacts]:
    """The facts the artefact's own provenance holds (None: none in the file, or a file that
    cannot be read as one: the record then says less, it is not refused)."""
    try:
        found = read_provenance(path) if Path(path).is_file() else None
    except (OSError, ValueError, UsageError):
        return None
    if found is None:
        return None
    return ArtefactFacts(model=found.model, precision=found.precision,
                         policy=to_json(found.policy), kept_cells=found.kept_paths(),
                         source="provenance")
