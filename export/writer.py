"""Build each network, trace it to every requested format, stage and commit the files."""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

from amptool.artefact.common import first_line
from amptool.errors import AmpToolError, UsageError
from amptool.fileio import atomic_path, sha256


def write_all(cfg, source, jobs: list) -> list:
    """Stage every (precision, format, path) job; rename all into place on success."""
    from amptool.artefact.manifest import manifest_path
    from amptool.checkpoint import read_checkpoint
    from amptool.policy import export_policy

    from .api import ExportResult

    params = read_checkpoint(source.checkpoint)
    ckpt_facts = {"path": str(source.checkpoint.resolve()), "sha256": sha256(source.checkpoint)}
    results = []
    with contextlib.ExitStack() as stack:
        for precision in dict.fromkeys(p for p, _, _ in jobs):
            policy = export_policy(source.policy) if precision == "fp16" else None
            net = _build(source, params, precision, policy, cfg.io_dtype)
            for prec, fmt, path in jobs:
                if prec != precision:
                    continue
                tmp = stack.enter_context(atomic_path(path))
                started = time.perf_counter()
                # the ONNX writer rewrites the network it traces: give it its own copy
                traced = _build(source, params, precision, policy, cfg.io_dtype) \
                    if fmt == "ONNX" else net
                _trace(traced, source, cfg, fmt, precision, tmp)
                seconds = time.perf_counter() - started
                manifest = _manifest(cfg, source, fmt, precision, policy, tmp, ckpt_facts)
                manifest["export_seconds"] = round(seconds, 4)
                mtmp = stack.enter_context(atomic_path(manifest_path(path)))
                _write_json(mtmp, manifest)
                results.append(ExportResult(fmt, precision, str(path), str(manifest_path(path)),
                                            manifest))
    return results


def _build(source, params, precision, policy, io_dtype):
    from .graph import build_network

    net, _ = build_network(source.spec, params, precision, policy, io_dtype,
                           f"checkpoint {source.checkpoint}")
    return net


def _trace(net, source, cfg, fmt, precision, tmp: Path) -> None:
    from .api import format_module
    from .graph import example_inputs

    io_dtype = cfg.io_dtype if precision == "fp16" else "fp32"
    inputs = example_inputs(source.spec, cfg.batch_size, cfg.dynamic_batch, io_dtype)
    module = format_module(fmt)
    key = cfg.encrypt_key if fmt in ("MINDIR", "AIR") else None
    try:
        module.write(net, inputs, tmp, key=key, dynamic_batch=cfg.dynamic_batch)
    except AmpToolError:
        raise
    except (RuntimeError, TypeError, ValueError) as exc:
        raise UsageError(f"{fmt} export of {source.spec.name} ({precision}) failed: "
                         f"{first_line(exc)}", "check that the model traces in GRAPH_MODE; "
                         "try another --format") from None
    if not tmp.is_file():
        raise UsageError(f"MindSpore wrote no {fmt} file for {source.spec.name}",
                         "check free disk space and retry")


def _manifest(cfg, source, fmt, precision, policy, tmp: Path, ckpt_facts: dict) -> dict:
    from amptool.artefact import reader
    from amptool.policy import make_policy

    from .manifest import build_manifest

    key = cfg.encrypt_key if fmt == "MINDIR" else None
    facts = reader(fmt).describe(tmp, key) if fmt != "AIR" else _air_facts(source)
    effective = policy if policy is not None else make_policy("O0")
    spec = source.spec
    return build_manifest(
        fmt=fmt, precision=precision, io_dtype=cfg.io_dtype if precision == "fp16" else "fp32",
        policy=effective.to_dict(), source_policy=source.policy.to_dict(), facts=facts,
        file_size=tmp.stat().st_size, sha256=sha256(tmp), checkpoint=ckpt_facts,
        model=spec.describe(),
        preprocess=source.preprocess, data=source.data, val_fraction=source.val_fraction,
        batch={"dynamic": cfg.dynamic_batch, "size": None if cfg.dynamic_batch else cfg.batch_size},
        encrypted=key is not None)


def _air_facts(source) -> dict:
    """AIR files are not parsed here: describe the traced inputs only."""
    return {"inputs": [], "outputs": [], "weights": {}}


def _write_json(path: Path, obj: dict) -> None:
    import json

    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")
