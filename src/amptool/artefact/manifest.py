"""The ``<artefact>.json`` manifest written beside every artefact.

Fields: format, precision, io_dtype, policy (the policy the graph was built with),
source_policy (the training run's), inputs, outputs, params {count, bytes, tensors,
dtypes}, file_size, sha256, checkpoint {path, sha256}, model {name, spec, input_shape,
num_classes}, preprocess, data, val_fraction, batch {size, dynamic}, mindspore_version,
amptool_version, created, encrypted, deployment {needed, kept_fp32, precision_mode, files,
why} (the runtime settings that keep fp32 cells fp32), task (the training run's loss: name,
kind, targets, classifier; null when unknown: parity then takes a 2-D first output for class
logits). Keys are never part of it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from amptool.errors import UsageError

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def manifest_path(artefact: str | os.PathLike) -> Path:
    artefact = Path(artefact)
    return artefact.with_name(artefact.name + ".json")


def read_manifest(artefact_path: str | os.PathLike) -> dict | None:
    """The manifest beside ``artefact_path``, or None when there is none."""
    path = manifest_path(artefact_path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"manifest {path} cannot be read ({exc})",
                         "delete it or export the artefact again") from None
    if not isinstance(data, dict):
        raise UsageError(f"manifest {path} is not a JSON object", "export the artefact again")
    return data


def summarize_params(weights: dict) -> dict:
    """{count, bytes, tensors, dtypes: {dtype: count}} from name -> (dtype, shape)."""
    count, nbytes, dtypes = 0, 0, {}
    for dtype, shape in weights.values():
        n = 1
        for d in shape:
            n *= int(d)
        count += n
        nbytes += n * ITEMSIZE.get(dtype, 0)
        dtypes[dtype] = dtypes.get(dtype, 0) + n
    return {"count": count, "bytes": nbytes, "tensors": len(weights),
            "dtypes": dict(sorted(dtypes.items()))}
