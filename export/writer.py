"""Build each network, trace it to every requested format, stage and commit the files;
one ``ExportResult`` per written artefact."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from amptool.errors import AmpToolError, UsageError, first_line
from amptool.fileio import atomic_path, sha256


@dataclass
class ExportResult:
    """One written artefact."""

    format: str
    precision: str
    path: str
    manifest_path: str
    manifest: dict

    def to_dict(self) -> dict:
        return {"format": self.format, "precision": self.precision, "path": self.path,
                "manifest_path": self.manifest_path, "manifest": self.manifest}


def format_module(name: str):
    """The writer module of a format: MINDIR, AIR or ONNX."""
    from . import air, mindir, onnx

    return {"MINDIR": mindir, "AIR": air, "ONNX": onnx}[name]


def write_all(cfg, trained, policy, jobs: list) -> list:
    """Stage every (precision, format, path) job; rename all into place on success."""
    from amptool.checkpoint import read_checkpoint
    from amptool.models import model_copy

    params = read_checkpoint(trained.checkpoint)
    ckpt_facts = {"path": str(trained.checkpoint.resolve()),
                  "sha256": sha256(trained.checkpoint)}
    results = []
    copy = model_copy(trained.spec, Path(jobs[0][2]).parent) if jobs else None
    kept_dir = copy[0].parent if copy else None
    made_dir = kept_dir is not None and not kept_dir.exists()
    try:
        with contextlib.ExitStack() as stack:
            if copy:  # the artefacts' folder carries the model file they were made from
                kept_dir.mkdir(parents=True, exist_ok=True)
                stack.enter_context(atomic_path(copy[0])).write_bytes(copy[1])
            _stage(cfg, trained, policy, jobs, params, ckpt_facts, copy[2] if copy else {}, stack,
                   results)
    except BaseException:
        if made_dir and not any(kept_dir.iterdir()):
            kept_dir.rmdir()
        raise
    return results


def _stage(cfg, trained, base, jobs, params, ckpt_facts, kept: dict, stack,
           results: list) -> None:
    """Trace each job into a staged temp file with its manifest (``kept``: the model file
    facts to record)."""
    from amptool.artefact.manifest import manifest_path
    from amptool.policy import export_policy

    for precision in dict.fromkeys(p for p, _, _ in jobs):
        policy = export_policy(base) if precision == "fp16" else None
        net = _build(trained, params, precision, policy, cfg.io_dtype)
        for prec, fmt, path in jobs:
            if prec != precision:
                continue
            tmp = stack.enter_context(atomic_path(path))
            started = time.perf_counter()
            # the ONNX writer rewrites the network it traces: give it its own copy
            traced = _build(trained, params, precision, policy, cfg.io_dtype) \
                if fmt == "ONNX" else net
            _trace(traced, trained, cfg, fmt, precision, tmp, path)
            seconds = time.perf_counter() - started
            manifest = _manifest(cfg, trained, fmt, precision, policy, tmp, ckpt_facts)
            manifest["model"].update(kept)
            manifest["export_seconds"] = round(seconds, 4)
            mtmp = stack.enter_context(atomic_path(manifest_path(path)))
            _write_json(mtmp, manifest)
            results.append(ExportResult(fmt, precision, str(path), str(manifest_path(path)),
                                        manifest))


def _build(trained, params, precision, policy, io_dtype):
    from .graph import build_network

    net, _ = build_network(trained.spec, params, precision, policy, io_dtype,
                           f"checkpoint {trained.checkpoint}")
    return net


def _trace(net, trained, cfg, fmt, precision, tmp: Path, target: Path) -> None:
    """Write ``fmt`` into the staged ``tmp`` for ``target``; failures name ``target``."""
    try:
        _write_format(net, trained, cfg, fmt, precision, tmp)
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}",
                         "free some space, raise the file size limit or write elsewhere") from None
    except UsageError as exc:
        if str(tmp) not in exc.problem:
            raise
        raise UsageError(exc.problem.replace(str(tmp), str(target)), exc.fix) from None


def _write_format(net, trained, cfg, fmt, precision, tmp: Path) -> None:
    from .graph import example_inputs

    io_dtype = cfg.io_dtype if precision == "fp16" else "fp32"
    inputs = example_inputs(trained.spec, cfg.batch_size, cfg.dynamic_batch, io_dtype)
    module = format_module(fmt)
    key = cfg.encrypt_key if fmt in ("MINDIR", "AIR") else None
    try:
        module.write(net, inputs, tmp, key=key, dynamic_batch=cfg.dynamic_batch)
    except AmpToolError:
        raise
    except (RuntimeError, TypeError, ValueError) as exc:
        fix = ("export with a fixed batch (drop --dynamic-batch), or check that the model "
               "traces in GRAPH_MODE" if cfg.dynamic_batch else
               "check that the model traces in GRAPH_MODE; try another --format")
        raise UsageError(f"{fmt} export of {trained.spec.name} ({precision}) failed: "
                         f"{first_line(exc)}", fix) from None
    if not tmp.is_file():
        raise UsageError(f"MindSpore wrote no {fmt} file for {trained.spec.name}",
                         "check free disk space and retry")


def _manifest(cfg, trained, fmt, precision, policy, tmp: Path, ckpt_facts: dict) -> dict:
    from amptool.artefact import reader
    from amptool.policy import make_policy

    from .manifest import build_manifest

    key = cfg.encrypt_key if fmt == "MINDIR" else None
    facts = reader(fmt).describe(tmp, key) if fmt != "AIR" else _air_facts(trained)
    effective = policy if policy is not None else make_policy("O0")
    spec = trained.spec
    return build_manifest(
        fmt=fmt, precision=precision, io_dtype=cfg.io_dtype if precision == "fp16" else "fp32",
        policy=effective.to_dict(), source_policy=trained.policy.to_dict(), facts=facts,
        file_size=tmp.stat().st_size, sha256=sha256(tmp), checkpoint=ckpt_facts,
        model=spec.describe(),
        preprocess=trained.preprocess, data=trained.data, val_fraction=trained.val_fraction,
        batch={"dynamic": cfg.dynamic_batch, "size": None if cfg.dynamic_batch else cfg.batch_size},
        encrypted=key is not None, task=trained.task)


def _air_facts(trained) -> dict:
    """AIR files are not parsed here: describe the traced inputs only."""
    return {"inputs": [], "outputs": [], "weights": {}}


def _write_json(path: Path, obj: dict) -> None:
    import json

    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")
