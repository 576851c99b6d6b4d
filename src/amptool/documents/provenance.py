"""Provenance: where an artefact came from, written inside the artefact itself.

A MindIR carries it in its ``ModelProto.user_info`` map, an ONNX file in its
``metadata_props``, both under the key ``PROVENANCE_KEY`` as one JSON document of type
``Provenance``. Unlike the manifest beside an artefact, it survives a rename or a copy of the
file alone. ``amptool.artefact.provenance.read_provenance`` reads it back from a file.

``schema_version`` is ``PROVENANCE_VERSION``; a newer one is refused (upgrade amptool), and
keys the types do not name are ignored, so a release may add keys without a new version.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import List, Literal, Optional

from amptool.documents.door import Document, Door, read_document
from amptool.documents.manifest import KeptCell, PolicyRecord, Preprocess
from amptool.errors import UsageError

PROVENANCE_VERSION = 1
"""The ``schema_version`` this release writes and the newest it reads."""
PROVENANCE_KEY = "amptool_provenance"
"""The key of the provenance entry in a MindIR's ``user_info`` and an ONNX's
``metadata_props``."""


@dataclass(frozen=True)
class SourceRun(Document):
    """The training run an artefact was exported from."""

    path: str
    """The run folder's absolute path when exported."""
    sha256: Optional[str]
    """Hex digest of its run.json then; null when it could not be read."""


@dataclass(frozen=True)
class SourceCheckpoint(Document):
    """The checkpoint the artefact's weights came from."""

    name: str
    """Its file name."""
    sha256: str
    """Hex digest of its bytes."""


@dataclass(frozen=True)
class Provenance(Document):
    """What an artefact written by amptool says of itself."""

    schema_version: int
    """The version of this layout."""
    amptool_version: str
    """amptool that wrote it."""
    mindspore_version: str
    """MindSpore that traced it."""
    format: Literal["MINDIR", "ONNX"]
    """The artefact's format."""
    precision: Literal["fp32", "fp16"]
    """The precision the graph computes in (fp16: but the kept cells)."""
    io_dtype: Literal["fp32", "fp16"]
    """The dtype of the graph's floating-point inputs and outputs."""
    model: str
    """The model reference (``--model``) it was built from."""
    run: Optional[SourceRun]
    """The training run; null when exported from a checkpoint alone (``--ckpt``)."""
    checkpoint: SourceCheckpoint
    """The checkpoint its weights came from."""
    policy: PolicyRecord
    """The policy the graph was built with (O0 for an fp32 graph)."""
    kept_fp32: List[KeptCell]
    """The cells an fp16 graph keeps in fp32 (empty for an fp32 graph, which keeps all)."""
    preprocess: Optional[Preprocess]
    """How raw images become its inputs; null when the inputs are not images or unknown."""
    data: Optional[str]
    """The data source the run trained on; null when unknown."""
    created: str
    """When, in UTC (ISO 8601)."""

    def to_json(self) -> str:
        """The entry's value: compact JSON, keys sorted."""
        return json.dumps(PROVENANCE.json(self), sort_keys=True, separators=(",", ":"))

    def kept_paths(self) -> List[str]:
        """The paths of the cells kept in fp32 ('' for the whole network)."""
        return [cell.path for cell in self.kept_fp32]


PROVENANCE = Door(Provenance, "provenance", "export the artefact again", PROVENANCE_VERSION,
                  "amptool provenance inside an artefact", "provenance.schema.json")


def parse_provenance(text: str, where: str) -> Provenance:
    """The ``Provenance`` an entry's value holds; one UsageError naming ``where`` and the
    field when it is not JSON or does not fit the type."""
    try:
        json.loads(text)
    except ValueError as exc:
        raise UsageError(f"provenance {where} is not JSON ({exc})", PROVENANCE.fix) from None
    return read_document(PROVENANCE, text, where)
