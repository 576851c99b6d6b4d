"""The files of one artefact: a single file, or a graph with its weights beside it.

Past a size, MindSpore writes an artefact's weights apart from its graph, and the set is
one artefact:

- MINDIR whose parameters pass 1 GiB (``TOTAL_SAVE`` in mindspore/train/serialization.py):
  ``<name>_graph.mindir`` plus a ``<name>_variables/`` folder of ``data_N`` files, which the
  graph names (``external_data``) relative to its own folder; ``mindspore.load`` on the
  graph file reads them back.
- ONNX past protobuf's 2 GiB: ``<name>.onnx`` plus the external data file(s) its
  initializers name (amptool writes one, ``<name>.onnx.data``); onnx and onnxruntime
  read them from beside the file.

The manifest lists every file of the set (``files``: path relative to the artefact's
folder, size, sha256); ``check_files`` says which differ.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from amptool.documents.manifest import FileFacts, Manifest
from amptool.errors import UsageError
from amptool.files.fileio import sha256

GRAPH_SUFFIX = "_graph.mindir"
VARIABLES_SUFFIX = "_variables"
ONNX_DATA_SUFFIX = ".data"
"""amptool's external data file of ``x.onnx``: ``x.onnx.data``."""


def mindir_variables(graph: str | os.PathLike) -> Path | None:
    """The ``<name>_variables`` folder of a split MindIR graph file, or None."""
    graph = Path(graph)
    if not graph.name.endswith(GRAPH_SUFFIX):
        return None
    folder = graph.with_name(graph.name[:-len(GRAPH_SUFFIX)] + VARIABLES_SUFFIX)
    return folder if folder.is_dir() else None


def split_mindir(path: str | os.PathLike) -> Path:
    """``x.mindir`` -> ``x_graph.mindir``: the name MindSpore gives a split export."""
    path = Path(path)
    stem = path.name[:-len(".mindir")] if path.name.endswith(".mindir") else path.name
    return path.with_name(stem + GRAPH_SUFFIX)


def locate(path: str | os.PathLike) -> Path:
    """``path``, or the split graph MindSpore wrote in its place (``x.mindir`` given, only
    ``x_graph.mindir`` there)."""
    path = Path(path)
    if not path.exists() and path.suffix.lower() == ".mindir":
        graph = split_mindir(path)
        if graph.is_file() and mindir_variables(graph) is not None:
            return graph
    return path


def companions(path: str | os.PathLike) -> list:
    """The other files of the artefact at ``path`` (weights written beside it), sorted."""
    path = Path(path)
    if path.suffix.lower() == ".mindir":
        folder = mindir_variables(path)
        return sorted(p for p in folder.rglob("*") if p.is_file()) if folder else []
    if path.suffix.lower() == ".onnx":
        return onnx_external_files(path)
    return []


def onnx_external_files(path: Path) -> list:
    """The external data files the ONNX graph at ``path`` names (none when it holds its
    weights itself); its weights are not loaded."""
    try:
        import onnx
    except ImportError:
        return []
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # an unreadable file: the format reader reports it
        return []
    names = set()
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    names.add(entry.value)
    return sorted(path.parent / n for n in names)


def artefact_files(path: str | os.PathLike) -> list:
    """Every file of the artefact: ``path`` first, then its companions."""
    return [Path(path), *companions(path)]


def file_facts(path: str | os.PathLike) -> list:
    """[{path (relative to the artefact's folder), size, sha256}] of every file of the set,
    in its order. The files of a set with weights apart are hashed side by side, one a
    core (hashlib lets go of the interpreter while it hashes)."""
    path = Path(path)
    names = [f.relative_to(path.parent).as_posix() for f in artefact_files(path)]
    if len(names) == 1:
        return [file_facts_of(path.parent, names[0])]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with ThreadPoolExecutor(max_workers=max(1, min(len(names), cores or 1))) as pool:
        return list(pool.map(lambda name: file_facts_of(path.parent, name), names))


def total_size(path: str | os.PathLike) -> int:
    return sum(f.stat().st_size for f in artefact_files(path))


def check_files(path: str | os.PathLike, manifest: Optional[Manifest],
                on_disk: list | None = None) -> list:
    """What differs between the artefact's files and the manifest: every file its ``files``
    lists, and the main file's ``sha256``/``file_size`` (all a manifest from before
    ``files`` has); one phrase a difference.
    ``on_disk``: ``file_facts(path)`` when already computed."""
    if not manifest:
        return []
    path = Path(path)
    listed = manifest.files or [FileFacts(path.name, manifest.file_size, manifest.sha256)]
    have = {f["path"]: f for f in (on_disk if on_disk is not None else file_facts(path))}
    problems = []
    for entry in listed:
        got = have.get(entry.path)
        if got is None and not (path.parent / entry.path).is_file():
            problems.append(f"{entry.path} is missing")
            continue
        if got is None:  # a file the set does not name (a foreign data file)
            got = file_facts_of(path.parent, entry.path)
        if got["size"] != entry.size:
            problems.append(f"{entry.path} has {got['size']} bytes, not {entry.size}")
        elif got["sha256"] != entry.sha256:
            problems.append(f"{entry.path} has another sha256")
    problems += [f"{name} is not in the manifest"
                 for name in sorted(set(have) - {e.path for e in listed})]
    main = have.get(path.name)
    if main is not None and not any(p.startswith(f"{path.name} ") for p in problems):
        if main["size"] != manifest.file_size:
            problems.append(f"{path.name} has {main['size']} bytes, not {manifest.file_size}")
        elif main["sha256"] != manifest.sha256:
            problems.append(f"{path.name} has another sha256")
    return problems


def file_facts_of(folder: Path, name: str) -> dict:
    f = folder / name
    return {"path": name, "size": f.stat().st_size, "sha256": sha256(f)}


def require_artefact(path: str | os.PathLike, what: str = "artefact") -> Path:
    """The existing artefact file at ``path`` (see ``locate``), or one line naming it."""
    found = locate(path)
    if not found.is_file():
        raise UsageError(f"{what} {path} does not exist", "check the path or export it first")
    return found


def hashed_files(path: str | os.PathLike) -> list:
    """``file_facts`` of the existing artefact ``path`` names (one line when there is none)."""
    return file_facts(require_artefact(path))
