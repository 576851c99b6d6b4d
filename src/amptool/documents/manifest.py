"""The ``<artefact>.json`` manifest written beside every artefact: ``Manifest`` and the types
nested in it say what each key holds; ``read_manifest`` holds a manifest to them at the door.
Keys are never part of it.

``schema_version`` is ``MANIFEST_VERSION``. A manifest without one was written before it
existed and is read as version 0: the keys added since (``ADDED_FIELD`` fields: ``files``,
``total_size``, ``deployment``, ``task``, the model's ``spec``, ``args``, ``input_spec`` and
``inputs``; ``ModelRecord`` is run.json's too) may be missing from it, and read as None. A
newer version is refused (upgrade amptool); a key no type names is refused (the door's rule).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

from amptool.documents.door import (ADDED_FIELD, Document, Door, Real, optional_key,
                                    read_document)
from amptool.errors import UsageError

MANIFEST_VERSION = 1
"""The ``schema_version`` this release writes and the newest it reads."""


@dataclass(frozen=True)
class Tensor(Document):
    """One graph input or output."""

    name: str
    """Its name in the graph."""
    shape: List[int]
    """Dimensions; -1 marks a dynamic one."""
    dtype: str
    """Its data type: float32, float16, int32, ..."""


@dataclass(frozen=True)
class ModelInput(Document):
    """One input the model declares."""

    name: str
    """The argument's name."""
    shape: List[int]
    """Dimensions; -1 marks a dynamic one (the first is the batch)."""
    dtype: str
    """Its data type."""
    range: Optional[List[Optional[Real]]] = optional_key()
    """[low, high] of the generated values, where declared (absent otherwise)."""


@dataclass(frozen=True)
class PolicyRecord(Document):
    """A precision policy (``amptool.precision.policy.Policy``)."""

    level: str
    """Base AMP level: O0, O1, O2 or O3."""
    dtype: str
    """Low-precision dtype: float16 or bfloat16."""
    fp32_types: List[str]
    """Cell class names kept in fp32 besides the level's black list."""
    fp32_cells: List[str]
    """Cell paths kept in fp32."""
    fp16_cells: List[str]
    """Cell paths forced to the low dtype."""


@dataclass(frozen=True)
class Params(Document):
    """The graph's stored floating-point parameters."""

    count: int
    """Number of values."""
    bytes: int
    """Bytes they take."""
    tensors: int
    """Number of tensors."""
    dtypes: Dict[str, int]
    """dtype -> number of values stored in it."""


@dataclass(frozen=True)
class FileFacts(Document):
    """One file of the artefact."""

    path: str
    """Relative to the artefact's folder."""
    size: int
    """Bytes."""
    sha256: str
    """Hex digest of its bytes."""


@dataclass(frozen=True)
class CheckpointFacts(Document):
    """The checkpoint the weights came from."""

    path: str
    """Its absolute path when exported."""
    sha256: str
    """Hex digest of its bytes."""


@dataclass(frozen=True)
class ModelRecord(Document):
    """The model the artefact was exported from."""

    name: str
    """The sample's name, or the factory reference."""
    spec: Optional[str] = field(metadata=ADDED_FIELD)
    """The reference ``--model`` takes to rebuild it."""
    input_shape: Optional[List[int]]
    """(C, H, W) of an image model; null for other inputs."""
    num_classes: Optional[int]
    """Classes of a classifier; null when the outputs are not class logits."""
    args: Optional[Dict[str, Any]] = field(metadata=ADDED_FIELD)
    """Keyword arguments given to the factory."""
    input_spec: Any = field(metadata=ADDED_FIELD)
    """The ``--input-spec`` given, or null."""
    inputs: Optional[List[ModelInput]] = field(metadata=ADDED_FIELD)
    """The inputs the model declares."""
    class_logits: Optional[List[int]] = optional_key()
    """Indices of the outputs that are class logits, where the model declares them."""
    file: Optional[str] = optional_key()
    """A ``file.py:factory`` model: the copy of its file kept beside the artefacts."""
    sha256: Optional[str] = optional_key()
    """A ``file.py:factory`` model: the hex digest of that copy."""


@dataclass(frozen=True)
class Preprocess(Document):
    """How raw images become model inputs (``amptool.data.dataset.Preprocess``)."""

    height: int
    """Image height fed to the model."""
    width: int
    """Image width fed to the model."""
    channels: int
    """Image channels fed to the model."""
    mean: Real
    """Subtracted from every pixel."""
    std: Real
    """Every pixel is divided by it."""


@dataclass(frozen=True)
class Batch(Document):
    """The batch dimension of the graph."""

    dynamic: bool
    """Whether the batch dimension is dynamic (-1)."""
    size: Optional[int]
    """The fixed batch size; null when dynamic."""


@dataclass(frozen=True)
class KeptCell(Document):
    """A cell an fp16 graph keeps in fp32."""

    path: str
    """Its path in the network ("" for the network itself)."""
    type: str
    """Its class name."""


@dataclass(frozen=True)
class SettingsFile(Document):
    """A runtime settings file written with the artefact."""

    kind: str
    """mindspore_lite_config or atc_options."""
    name: str
    """Its file name, beside the artefact."""
    sha256: str
    """Hex digest of its bytes."""


@dataclass(frozen=True)
class Deployment(Document):
    """The runtime settings that keep an fp16 graph's fp32 cells in fp32."""

    needed: bool
    """Whether the graph keeps cells in fp32 that a runtime must be told about."""
    kept_fp32: List[KeptCell]
    """The cells kept in fp32."""
    precision_mode: Optional[Dict[str, str]]
    """runtime -> the precision mode to set (mindspore_lite, acl); null when none needed."""
    files: List[SettingsFile]
    """The settings files written beside the artefact."""
    why: str
    """Why they are needed, or why not."""


@dataclass(frozen=True)
class Task(Document):
    """What the training run's loss makes of the outputs."""

    name: str
    """The loss's name."""
    kind: str
    """cross-entropy, token-cross-entropy, mse, ... or factory."""
    targets: List[str]
    """Names of the data arrays it takes as targets."""
    classifier: bool
    """Class cross-entropy on integer labels: accuracy applies to the first output."""
    ignore_index: Optional[int] = optional_key()
    """The label a token cross-entropy ignores (only for that kind)."""


@dataclass(frozen=True)
class Manifest(Document):
    """The manifest beside an artefact ``model_fp16.mindir``: ``model_fp16.mindir.json``."""

    schema_version: Optional[int] = field(metadata=ADDED_FIELD)
    """The version of this layout; absent from manifests written before it existed."""
    format: Literal["MINDIR", "AIR", "ONNX"]
    """The artefact's format."""
    precision: Literal["fp32", "fp16"]
    """The precision the graph computes in."""
    io_dtype: Literal["fp32", "fp16"]
    """The dtype of the graph's inputs and outputs."""
    policy: PolicyRecord
    """The policy the graph was built with (O0 for an fp32 graph)."""
    source_policy: PolicyRecord
    """The training run's (or checkpoint's) policy."""
    inputs: List[Tensor]
    """The graph's inputs (empty for AIR, which is not read back)."""
    outputs: List[Tensor]
    """The graph's outputs (empty for AIR)."""
    params: Params
    """The stored parameters."""
    file_size: int
    """Bytes of the main file."""
    sha256: str
    """Hex digest of the main file."""
    files: Optional[List[FileFacts]] = field(metadata=ADDED_FIELD)
    """Every file of the artefact, the main file first."""
    total_size: Optional[int] = field(metadata=ADDED_FIELD)
    """Bytes of all ``files``."""
    checkpoint: CheckpointFacts
    """The checkpoint the weights came from."""
    model: ModelRecord
    """The model reference."""
    preprocess: Optional[Preprocess]
    """How images are prepared; null when the data is not images or unknown."""
    data: Optional[str]
    """The data source the run trained on; null when unknown."""
    val_fraction: Optional[Real]
    """The held-out fraction of that data; null when unknown."""
    batch: Batch
    """The batch dimension."""
    mindspore_version: str
    """MindSpore that wrote it."""
    amptool_version: str
    """amptool that wrote it."""
    created: str
    """When, in UTC (ISO 8601)."""
    encrypted: bool
    """Whether the MINDIR is encrypted (the key is never written)."""
    export_seconds: Real
    """Time the export of this artefact took."""
    deployment: Optional[Deployment] = field(metadata=ADDED_FIELD)
    """The runtime settings written with the artefact; null (as absent) when none were
    recorded: readers then take no settings as needed."""
    task: Optional[Task] = field(metadata=ADDED_FIELD)
    """The training run's loss; null when unknown."""


MANIFEST = Door(Manifest, "manifest", "export the artefact again", MANIFEST_VERSION,
                "amptool artefact manifest", "manifest.schema.json")
"""The manifest's door: read by ``read_manifest``, published as its JSON Schema."""

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def manifest_path(artefact: str | os.PathLike) -> Path:
    artefact = Path(artefact)
    return artefact.with_name(artefact.name + ".json")


def read_manifest(artefact_path: str | os.PathLike) -> Manifest | None:
    """The manifest beside ``artefact_path`` (held to ``Manifest``: a UsageError names the file
    and the field that does not fit), or None when there is none."""
    path = manifest_path(artefact_path)
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        json.loads(text)
    except (OSError, ValueError) as exc:
        raise UsageError(f"manifest {path} cannot be read ({exc})",
                         "delete it or export the artefact again") from None
    return read_document(MANIFEST, text, path)


def summarize_params(weights: dict) -> dict:
    """{count, bytes, tensors, dtypes: {dtype: count}} from name -> (dtype, shape)."""
    count, nbytes = 0, 0
    dtypes: Dict[str, int] = {}
    for dtype, shape in weights.values():
        n = 1
        for d in shape:
            n *= int(d)
        count += n
        nbytes += n * ITEMSIZE.get(dtype, 0)
        dtypes[dtype] = dtypes.get(dtype, 0) + n
    return {"count": count, "bytes": nbytes, "tensors": len(weights),
            "dtypes": dict(sorted(dtypes.items()))}
