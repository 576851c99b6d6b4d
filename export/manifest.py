"""Building the manifest written beside every artefact (read by ``amptool.artefact.manifest``)."""
from __future__ import annotations

import time

from amptool.artefact.manifest import summarize_params


def build_manifest(*, fmt: str, precision: str, io_dtype: str, policy: dict, source_policy: dict,
                   facts: dict, file_size: int, sha256: str, checkpoint: dict, model: dict,
                   preprocess: dict | None, data: str | None, val_fraction: float | None,
                   batch: dict, encrypted: bool, task: dict | None = None) -> dict:
    import mindspore as ms

    import amptool

    return {
        "format": fmt, "precision": precision, "io_dtype": io_dtype, "policy": policy,
        "source_policy": source_policy, "inputs": facts["inputs"], "outputs": facts["outputs"],
        "params": summarize_params(facts["weights"]), "file_size": file_size, "sha256": sha256,
        "checkpoint": checkpoint, "model": model, "preprocess": preprocess, "data": data,
        "val_fraction": val_fraction, "batch": batch, "mindspore_version": ms.__version__,
        "amptool_version": amptool.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "encrypted": encrypted,
        "task": task,
    }
