"""Building the manifest written beside every artefact (read by ``amptool.documents.manifest``)."""
from __future__ import annotations

import time

from pathlib import Path

import amptool
from amptool.documents.door import from_json
from amptool.documents.manifest import (MANIFEST_VERSION, KeptCell, Manifest, PolicyRecord,
                                        Preprocess, summarize_params)
from amptool.documents.provenance import (PROVENANCE_VERSION, Provenance, SourceCheckpoint,
                                          SourceRun)
from amptool.files.fileio import sha256


def build_manifest(*, fmt: str, precision: str, io_dtype: str, policy: dict, source_policy: dict,
                   facts: dict, files: list, checkpoint: dict, model: dict,
                   preprocess: dict | None, data: str | None, val_fraction: float | None,
                   batch: dict, encrypted: bool, export_seconds: float, deployment: dict,
                   task: dict | None = None) -> Manifest:
    """The whole manifest, built once (``files``: every file of the artefact ([{path, size,
    sha256}], its main file first); ``file_size`` and ``sha256`` are the main file's,
    ``total_size`` the set's); the parts other modules describe are held to their types here."""
    import mindspore as ms

    return from_json(Manifest, {
        "schema_version": MANIFEST_VERSION, "format": fmt, "precision": precision,
        "io_dtype": io_dtype, "policy": policy,
        "source_policy": source_policy, "inputs": facts["inputs"], "outputs": facts["outputs"],
        "params": summarize_params(facts["weights"]), "file_size": files[0]["size"],
        "sha256": files[0]["sha256"], "files": files, "total_size": sum(f["size"] for f in files),
        "checkpoint": checkpoint, "model": model, "preprocess": preprocess, "data": data,
        "val_fraction": val_fraction, "batch": batch, "mindspore_version": ms.__version__,
        "amptool_version": amptool.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "encrypted": encrypted,
        "task": task, "export_seconds": round(export_seconds, 4), "deployment": deployment,
    }, "manifest")


def build_provenance(*, fmt: str, precision: str, io_dtype: str, policy: dict, kept: list,
                     checkpoint: dict, run: str | None, model: str,
                     preprocess: dict | None, data: str | None):
    """The ``Provenance`` written inside the artefact (``amptool.documents.provenance``);
    ``checkpoint`` is the manifest's {path, sha256}, ``run`` the run folder (None with
    ``--ckpt``), ``kept`` the [{path, type}] of the cells kept in fp32."""
    import mindspore as ms

    source = None
    if run is not None:
        record = Path(run) / "run.json"
        source = SourceRun(str(Path(run).resolve()),
                           sha256(record) if record.is_file() else None)
    fields = ("height", "width", "channels", "mean", "std")
    return Provenance(
        schema_version=PROVENANCE_VERSION, amptool_version=amptool.__version__,
        mindspore_version=ms.__version__, format=fmt, precision=precision,  # type: ignore[arg-type]
        io_dtype=io_dtype, model=model, run=source,  # type: ignore[arg-type]
        checkpoint=SourceCheckpoint(Path(checkpoint["path"]).name, checkpoint["sha256"]),
        policy=PolicyRecord(**{k: policy[k] for k in ("level", "dtype", "fp32_types",
                                                      "fp32_cells", "fp16_cells")}),
        kept_fp32=[KeptCell(c["path"], c["type"]) for c in kept],
        preprocess=Preprocess(**{k: preprocess[k] for k in fields}) if preprocess else None,
        data=data, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
