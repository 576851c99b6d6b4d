"""A .ckpt past protobuf's 2 GiB, read after onnx and onnxruntime were imported.

The file is a valid MindSpore checkpoint (one ``Checkpoint`` message of float32 tensors)
written sparse: its tensor bytes are holes, so it takes almost no disk, but every byte is
read and parsed. Each read runs in a fresh process that imports onnx and onnxruntime
first, as ``amptool export --format ONNX`` does:

- default: amptool asks protobuf for the pure-python parser, the read succeeds;
- ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=upb`` (a process that chose upb itself): the
  read is refused in one line naming the parser, not called corrupt.

Needs about 3.5x the file in free memory (the file read, the parsed message, the tensors).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TENSOR_BYTES = 256 << 20
"""Each tensor: 64 Mi float32 values."""


def write_sparse_checkpoint(path: Path, tensors: int, nbytes: int = TENSOR_BYTES) -> int:
    """``tensors`` zero float32 tensors ``w0..`` of ``nbytes`` each; returns the file size."""
    from amptool.network.ckptstream import record_head

    with open(path, "wb") as fh:
        for i in range(tensors):
            fh.write(record_head(f"w{i}", [nbytes // 4], "Float32", nbytes))
            fh.seek(nbytes, os.SEEK_CUR)  # the tensor's bytes: a hole, read back as zeros
        fh.truncate(fh.tell())
        return fh.tell()


READ = """
import json, resource, sys, time
import amptool.artefact.onnx as fmt
fmt.require_onnx()  # onnx and onnxruntime first, as export --format ONNX does
from amptool.network.checkpoint import protobuf_implementation, read_checkpoint
from amptool.errors import UsageError
t0 = time.perf_counter()
try:
    params = read_checkpoint(sys.argv[1])
    result = {"ok": True, "tensors": len(params),
              "bytes": sum(p.asnumpy().nbytes for p in params.values())}
except UsageError as exc:
    result = {"ok": False, "error": str(exc)}
result.update(seconds=round(time.perf_counter() - t0, 2), parser=protobuf_implementation(),
              peak_rss_gb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2))
print(json.dumps(result))
"""


def _read(path: Path, parser: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    if parser:
        env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = parser
    done = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True,
                          text=True, env=env, timeout=1800, check=False)
    if done.returncode != 0:
        return {"ok": False, "crashed": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> dict:
    tensors = 9  # 2.25 GiB: past 2 GiB either way (quick changes nothing: the size is the point)
    with tempfile.TemporaryDirectory(prefix="amptool-bigckpt-") as tmp:
        path = Path(tmp) / "big.ckpt"
        t0 = time.perf_counter()
        size = write_sparse_checkpoint(path, tensors)
        written = time.perf_counter() - t0
        default = _read(path, None)
        upb = _read(path, "upb")
    return {
        "checkpoint_gb": round(size / 1e9, 3), "write_seconds": round(written, 2),
        "after_onnx": default, "after_onnx_upb": upb,
        "targets": {"after_onnx": "reads every tensor (parser python)",
                    "after_onnx_upb": "one line naming the parser, no 'corrupt'"},
    }


def summary(f: dict) -> list:
    """The summary's row (docs/bench.md)."""
    read, upb = f["after_onnx"], f["after_onnx_upb"]
    figure = (f"{'read' if read.get('ok') else 'not read'} in {read.get('seconds', 0):.1f} s, "
              f"peak RSS {read.get('peak_rss_gb', 0):.2f} GB; under upb: "
              + ("one line naming the parser" if not upb.get("ok") and "parser" in str(upb)
                 else str(upb)))
    return [(f"a {f['checkpoint_gb']:.2f} GB .ckpt read after onnx and onnxruntime are imported",
             figure, "")]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
