"""Export benchmark: FP32 vs FP16 artefact sizes, export time, CPU inference time.

Per sample model (weights from its initialisation; sizes and speed do not depend on
training): MINDIR and ONNX in fp32 and fp16 (dynamic batch), measured side by side in one
run, plus MindSpore's own export of the O2 network as it is (fp32 weights + Cast ops).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

MODELS = ("simplecnn", "lenet5", "resnet", "transformer", "trapmlp")


def _median_ms(fn, reps: int) -> float:
    fn()  # warm-up (compilation)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return float(np.median(times))


def _naive_o2_size(spec, params, tmp: Path) -> int:
    """mindspore.export of the network under MindSpore's O2 as it is."""
    import mindspore as ms

    from amptool.network.checkpoint import load_into_net

    net = spec.build()
    load_into_net(net, params)
    net = ms.amp.auto_mixed_precision(net, "O2")
    net.set_train(False)
    path = tmp / f"naive_{spec.name}"
    ms.export(net, ms.Tensor(shape=[None, *spec.input_shape], dtype=ms.float32),
              file_name=str(path), file_format="MINDIR")
    return os.path.getsize(str(path) + ".mindir")


def bench_model(name: str, tmp: Path, reps: int, batch: int) -> dict:
    import mindspore as ms

    from amptool.artefact.runners import load_runner
    from amptool.export.api import ExportConfig, export
    from amptool.network.checkpoint import read_checkpoint
    from amptool.network.models import resolve_model

    spec = resolve_model(name)
    ms.set_seed(0)
    ckpt = tmp / f"{name}.ckpt"
    ms.save_checkpoint(spec.build(), str(ckpt))
    t0 = time.perf_counter()
    results = export(ExportConfig(ckpt=str(ckpt), model=name, formats=("MINDIR", "ONNX"),
                                  dynamic_batch=True, out=str(tmp / name), data="none"))
    total_export_s = time.perf_counter() - t0
    x = np.random.default_rng(0).standard_normal((batch, *spec.input_shape)).astype(np.float32)
    row = {"model": name, "export_s_total": round(total_export_s, 3)}
    for r in results:
        tag = f"{r.format.lower()}_{r.precision}"
        runner = load_runner(r.path)
        row[f"{tag}_bytes"] = r.manifest.file_size
        row[f"{tag}_param_bytes"] = r.manifest.params.bytes
        row[f"{tag}_export_s"] = r.manifest.export_seconds
        row[f"{tag}_infer_ms"] = round(_median_ms(lambda: runner.run([x]), reps), 3)
    for fmt in ("mindir", "onnx"):
        row[f"{fmt}_file_ratio"] = round(row[f"{fmt}_fp16_bytes"] / row[f"{fmt}_fp32_bytes"], 4)
        row[f"{fmt}_param_ratio"] = round(row[f"{fmt}_fp16_param_bytes"]
                                          / row[f"{fmt}_fp32_param_bytes"], 4)
    net = spec.build()
    net.set_train(False)
    row["in_memory_fp32_infer_ms"] = round(_median_ms(lambda: net(ms.Tensor(x)).asnumpy(), reps), 3)
    row["naive_o2_mindir_ratio"] = round(
        _naive_o2_size(spec, read_checkpoint(ckpt), tmp) / row["mindir_fp32_bytes"], 4)
    return row


def run(quick: bool = False) -> dict:
    from amptool.runtime.device import set_device

    set_device("CPU")
    models = MODELS[:2] if quick else MODELS
    reps, batch = (5, 32) if quick else (20, 32)
    with tempfile.TemporaryDirectory(prefix="amptool-bench-export-") as tmp:
        rows = [bench_model(name, Path(tmp), reps, batch) for name in models]
    return {"batch": batch, "reps": reps, "device": "CPU", "models": rows}


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
