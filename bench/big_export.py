"""A network past 2 GiB of weights, end to end: checkpoint, export MINDIR + ONNX, parity.

``big_mlp`` (9 x Dense(8192, 8192), 604M parameters, 2.42 GB in fp32) is saved as a .ckpt,
then ``amptool export --format MINDIR,ONNX --precision fp32`` runs in a fresh process (the
ONNX path imports onnx first: the checkpoint must still be read), then ``amptool inspect``
and ``amptool parity`` on what it wrote. MINDIR comes out split (graph + variables
folder), ONNX with its weights in ``.onnx.data``. Needs about 12 GB of free memory and
10 GB of disk; takes minutes.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL_FILE = '''
import mindspore as ms
from mindspore import nn, ops


class BigMLP(nn.Cell):
    def __init__(self, width=8192, depth={depth}, classes=10):
        super().__init__()
        self.layers = nn.CellList([nn.Dense(width, width) for _ in range(depth)])
        self.head = nn.Dense(width, classes)
        self.flatten = nn.Flatten()
        self.scale = width ** -0.5

    def construct(self, x):
        x = self.flatten(x)
        for layer in self.layers:
            x = ops.tanh(layer(x) * self.scale)
        return self.head(x)


def big_mlp():
    ms.set_seed(0)
    net = BigMLP()
    net.input_shape, net.num_classes = (1, 64, 128), 10
    return net
'''


def _amptool(*args, cwd) -> tuple:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "amptool", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=7200, check=False)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, round(time.perf_counter() - t0, 1), round(usage.ru_maxrss / 1e6, 2)


def run(quick: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="amptool-bigexport-") as tmp:
        tmp = Path(tmp)
        (tmp / "big.py").write_text(MODEL_FILE.format(depth=9))
        sys.path.insert(0, str(tmp))
        import mindspore as ms

        import big

        t0 = time.perf_counter()
        net = big.big_mlp()
        ms.save_checkpoint(net, str(tmp / "big.ckpt"))
        del net
        saved = round(time.perf_counter() - t0, 1)
        ckpt_gb = round(os.path.getsize(tmp / "big.ckpt") / 1e9, 3)
        out = tmp / "out"
        exported, export_s, export_rss = _amptool(
            "export", "--ckpt", tmp / "big.ckpt", "--model", f"{tmp / 'big.py'}:big_mlp",
            "--data", "none", "-f", "mindir,onnx", "--precision", "fp32",
            "--out", out, "--json", cwd=tmp)
        result = {"checkpoint_gb": ckpt_gb, "checkpoint_save_s": saved,
                  "export_exit": exported.returncode, "export_s": export_s,
                  "export_peak_rss_gb": export_rss}
        if exported.returncode != 0:
            result["export_error"] = exported.stderr.strip().splitlines()[-1:]
            return result
        arts = json.loads(exported.stdout)
        result["artefacts"] = {a["format"]: {"path": Path(a["path"]).name,
                                             "files": [(f["path"], f["size"])
                                                       for f in a["manifest"]["files"]]}
                               for a in arts}
        paths = {a["format"]: a["path"] for a in arts}
        inspected, _, _ = _amptool("inspect", paths["MINDIR"], cwd=tmp)
        result["inspect_matches"] = "matches the file" in inspected.stdout
        compared, parity_s, _ = _amptool("parity", paths["MINDIR"], paths["ONNX"], "--samples",
                                         "8", "--data", "synthetic", "-q", cwd=tmp)
        result.update(parity_exit=compared.returncode, parity_s=parity_s,
                      parity_tail=(compared.stdout + compared.stderr).strip().splitlines()[-2:])
    result["targets"] = {"export_exit": 0, "parity_exit": 0}
    return result


def summary(f: dict) -> list:
    """The summary's row (docs/bench.md)."""
    ok = f.get("export_exit") == 0 and f.get("parity_exit") == 0
    what = (f"604M-parameter Dense stack ({f['checkpoint_gb']:.2f} GB fp32 .ckpt): `amptool "
            "export -f MINDIR,ONNX --precision fp32`, then inspect and parity")
    figure = (f"export {f['export_s']:.0f} s, peak RSS {f['export_peak_rss_gb']:.2f} GB "
              f"({f['export_peak_rss_gb'] / f['checkpoint_gb']:.2f}× the weights); "
              f"parity {'passes' if ok else 'fails'} ({f.get('parity_s', 0):.0f} s)")
    return [(what, figure, "")]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
