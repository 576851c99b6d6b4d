"""The JSON documents amptool writes, held to the JSON Schemas it publishes
(docs/reference/schemas), with the ``jsonschema`` library: what a document is by where it lies
(``kind_of``), the documents under a folder (``documents_under``), and the check itself
(``problems``, ``assert_fits``)."""
from __future__ import annotations

import functools
import json
import zipfile
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "reference" / "schemas"
KINDS = ("manifest", "run", "parity-report", "summary", "golden-meta", "search-result", "diff")
"""Each kind's schema is ``<kind>.schema.json``."""
ARTEFACT_SUFFIXES = (".mindir", ".onnx", ".air")


@functools.lru_cache(maxsize=None)
def validator(kind: str):
    import jsonschema

    schema = json.loads((SCHEMAS / f"{kind}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(doc, kind: str) -> List[str]:
    """Where ``doc`` departs from the published schema of ``kind`` (empty: it fits)."""
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in validator(kind).iter_errors(doc)]


def assert_fits(doc, kind: str, where: str = "") -> None:
    found = problems(doc, kind)
    assert not found, f"{where or kind} departs from {kind}.schema.json: {found[:5]}"


def kind_of(path: Path) -> Optional[str]:
    """The kind of document a file amptool wrote is, by its name and what lies beside it
    (None: no document)."""
    name = path.name
    if name == "run.json":
        return "run"
    if name == "summary.json":
        return "summary"
    if name == "parity.json":
        return "parity-report"
    if name == "diff.json":  # a run folder's diff against its --baseline
        return "diff"
    if name.endswith(".json") and name[:-5].endswith(ARTEFACT_SUFFIXES):
        artefact = path.with_name(name[:-5])
        graph = artefact.with_name(artefact.stem + "_graph" + artefact.suffix)
        return "manifest" if artefact.exists() or graph.exists() else None
    if name.endswith(".npz") and _golden_meta(path) is not None:
        return "golden-meta"
    return None


def _golden_meta(path: Path):
    """The ``meta`` entry of an npz file, as JSON (None: no such entry)."""
    try:
        with zipfile.ZipFile(path) as z:
            if "meta.npy" not in z.namelist():
                return None
    except (OSError, zipfile.BadZipFile):
        return None
    import numpy as np

    with np.load(path) as z:
        return json.loads(np.asarray(z["meta"]).tobytes().decode("utf-8"))


def read(path: Path, kind: str):
    return _golden_meta(path) if kind == "golden-meta" else json.loads(path.read_text())


def documents_under(root: Path) -> Iterator[Tuple[str, Path]]:
    """(kind, path) of every document amptool wrote under ``root``: a file whose name says
    what it is and that holds JSON (a file being written, or left half-written by a test
    on purpose, is skipped)."""
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".json", ".npz") or not path.is_file() or path.is_symlink():
            continue
        kind = kind_of(path)
        if kind is None:
            continue
        try:
            read(path, kind)
        except (OSError, ValueError):
            continue
        yield kind, path
