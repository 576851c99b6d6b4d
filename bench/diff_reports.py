"""``amptool diff`` of two 100,000-sample parity reports.

A report's size does not grow with its samples: its figures are a fixed set per output, the
counted ones carry their interval; only the per-layer rows (one a cell of the network) and
the findings add keys. So the two reports here are made as parity makes them, from
100,000 samples of 10-class logits: ``compute_metrics`` and ``check_metrics`` on a reference
and an fp16-rounded candidate (NEW's candidate noisier), three candidates (fp16 MindIR, fp32
and fp16 ONNX), each with a per-layer section of ``CELLS`` cells (a network about ResNet-50's
depth) and a few findings, written as ``amptool parity --json-out`` writes them.

Figures: each report's bytes; the seconds of ``amptool.gate.diff.diff`` in this process
(both files read and held to their types, compared, the regressions ranked; median of
``ROUNDS``) and of the whole command as a fresh process (``amptool diff BASE NEW --json``,
start-up included; median of its rounds, wall and CPU seconds: on a shared machine the
CPU seconds are the steadier figure). Target: the command <= 1 s.
"""
from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SAMPLES = 100_000
CLASSES = 10
CELLS = 500
ROUNDS = 7


def _output(ref, cand, labels) -> dict:
    from amptool.stats.limits import FP16_VS_FP32
    from amptool.stats.metrics import check_metrics, compute_metrics

    metrics = compute_metrics(ref, cand, labels)
    checks = check_metrics(metrics, FP16_VS_FP32)
    return {"name": "logits", "metrics": metrics, "checks": checks,
            "passed": all(c["passed"] is not False for c in checks),
            "thresholds": FP16_VS_FP32.to_dict()}


def _layers(rng, noise: float) -> dict:
    rows = []
    error = 0.0
    for i in range(CELLS):
        before = error
        error = min(1.0, error + abs(rng.normal(0, noise)))
        rows.append({"path": f"layer{i // 10}.block{i % 10}", "type": "Conv2d",
                     "dtype": "float16", "cosine": 1 - error, "rel_l2": error ** 0.5,
                     "max_rel": error, "max_abs": error, "nonfinite": 0, "ref_absmax": 3.0,
                     "subnormal": 0.0, "fp16_risk": None, "in_cosine": 1 - before,
                     "flagged": False, "origin": None})
    return {"model": "resnet50", "policy": "O2/float16", "samples": 32, "min_cosine": 0.999,
            "rows": rows, "first_flagged": None, "origin": None}


def make_report(seed: int, noise: float) -> dict:
    """A parity report's document of ``SAMPLES`` samples (``noise``: the candidates' extra
    error on top of fp16 rounding)."""
    import numpy as np

    from amptool.stats.limits import FP16_VS_FP32

    rng = np.random.default_rng(0)
    ref = (rng.standard_normal((SAMPLES, CLASSES)) * 4).astype(np.float32)
    labels = ref.argmax(axis=1)
    wrong = rng.random(SAMPLES) < 0.08
    labels[wrong] = rng.integers(0, CLASSES, int(wrong.sum()))
    own = np.random.default_rng(seed)
    candidates = []
    for fmt, precision in (("MINDIR", "fp16"), ("ONNX", "fp32"), ("ONNX", "fp16")):
        cand = ref.astype(np.float16).astype(np.float32) if precision == "fp16" else ref.copy()
        cand += (own.standard_normal(ref.shape) * noise).astype(np.float32)
        output = _output(ref, cand, labels)
        candidates.append({
            "path": f"runs/ci/export/net_{precision}.{fmt.lower()}", "format": fmt,
            "precision": precision, "kind": "artefact", "passed": output["passed"],
            "thresholds": FP16_VS_FP32.to_dict(), "outputs": [output], "task": None,
            "findings": [{"kind": "fp16_emulated", "where": "runtime", "message": "a note",
                          "fix": "a fix"}] * 3,
            "fp16_faithful": precision == "fp16" or None, "caveat": None,
            "per_layer": _layers(own, noise + 1e-6), "weights": None, "culprit": None,
            "deployment": None})
    return {"schema_version": 1, "passed": all(c["passed"] for c in candidates),
            "reference": {"path": "runs/ci/export/net_fp32.mindir", "kind": "artefact",
                          "format": "MINDIR", "precision": "fp32", "model": "resnet50",
                          "preprocess": None, "policy": None},
            "inputs": {"description": f"npz:release.npz held-out split ({SAMPLES} samples)",
                       "samples": SAMPLES, "labels": True, "targets": ["y"],
                       "labels_from": "y"},
            "candidates": candidates, "golden_saved": None, "device": "CPU", "seconds": 600.0}


def run(quick: bool = False) -> dict:
    from amptool.files.fileio import jsonable
    from amptool.gate.diff import diff
    from amptool.gate.diffconfig import DiffConfig

    from bench import amptool_command

    with tempfile.TemporaryDirectory(prefix="bench-diff-") as tmp:
        base, new = Path(tmp) / "base.json", Path(tmp) / "new.json"
        base.write_text(json.dumps(jsonable(make_report(1, 0.0)), sort_keys=True))
        new.write_text(json.dumps(jsonable(make_report(2, 2e-3)), sort_keys=True))
        rounds = 3 if quick else ROUNDS
        inside, command, cpu = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            report = diff(DiffConfig(str(base), str(new)))
            inside.append(time.perf_counter() - t0)
        cmd = amptool_command() + ["diff", str(base), str(new), "--json"]
        for _ in range(rounds):
            used = _children_cpu()
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            command.append(time.perf_counter() - t0)
            cpu.append(_children_cpu() - used)
        assert done.returncode in (0, 1), done.stderr
        sizes = (base.stat().st_size, new.stat().st_size)
    return {"samples": SAMPLES, "cells": CELLS, "candidates": 3,
            "report_bytes": max(sizes), "regressions": len(report.regressions),
            "library_s": round(statistics.median(inside), 4),
            "command_s": round(statistics.median(command), 3),
            "command_cpu_s": round(statistics.median(cpu), 3), "rounds": rounds,
            "targets": {"command_s": "<= 1"}}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summary(f: dict) -> list:
    """The summary's row (docs/bench.md)."""
    return [(f"`amptool diff` of two {f['samples']:,}-sample parity reports ({f['candidates']} "
             f"candidates, {f['cells']} per-layer cells each, {f['report_bytes'] / 1e3:,.0f} kB)",
             f"{f['command_s']:.2f} s as a command, start-up included ({f['command_cpu_s']:.2f} "
             f"CPU-s); {f['library_s'] * 1e3:.0f} ms in the library", "≤ 1 s")]


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
