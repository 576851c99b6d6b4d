"""Model zoo benchmark: real users' networks (mindcv, ``pretrained=False``) through amptool.

Per network, the flow a user runs through the public API: ``amptool.train`` on the first
160 bundled digits (an npz source resized by amptool: 128 train, 32 held out; 3 epochs,
batch 32, the default O2 policy), ``amptool.export`` MINDIR fp32 + fp16, then ONNX fp32 +
fp16 (a second call: an operator the ONNX exporter lacks costs only the ONNX files), and
``amptool.parity`` on the held-out digits: fp16 MindIR against the fp32 MindIR (whose
outputs are stored), then the ONNX files against those stored outputs.

One row per network: parameters, the fp16 / fp32 MindIR file ratio and the limit it is
held to, ONNX (or the exporter's error line), the fp16 verdict's cosine and top-1
agreement, the ONNX verdict, seconds, and a result with its reason. The size limit is
the file with every parameter halved and the graph unchanged:
(fp32 parameter bytes / 2 + graph bytes) / fp32 file bytes, graph bytes being the fp32
file bytes less its parameter bytes (the manifests' ``params.bytes`` and ``file_size``),
plus ``SIZE_SLACK`` for what the fp16 graph adds: parameters the policy keeps fp32
(BatchNorm, LayerNorm) and the Cast nodes around them.

``markdown(figures)`` renders the zoo's table (docs/guides/zoo.md, docs/bench.md) from these
figures.
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SAMPLES = 160
BATCH = 32
EPOCHS = 3
"""Three epochs of 4 steps: the first steps of a run overflow while the dynamic loss scale
comes down from 65536, and the weights must have been updated for a while."""
SIZE_SLACK = 0.05
"""Allowed excess of the fp16 / fp32 file ratio over the all-halved limit: normalization
parameters kept fp32 and the Cast nodes around them (measured up to +0.035 on these
networks). A graph whose weights stayed fp32 is far above it (ratio ~1)."""


@dataclass(frozen=True)
class Net:
    """A network as a user names it to amptool: its model reference and factory arguments,
    and the square input (3 x size x size) it is trained and exported at."""

    name: str
    model: str
    args: dict = field(default_factory=dict)
    size: int = 32
    dynamic_batch: bool = True
    """False where a dynamic batch does not work: ViT's class token (BroadcastTo) in ONNX,
    EdgeNeXt's positional encoding in MINDIR, MobileViT's MindIR (written, but MindSpore
    cannot compile it back: control flow on the shape)."""


def _zoo(name: str, size: int = 32, dynamic_batch: bool = True) -> Net:
    return Net(name, "mindcv:create_model",
               {"model_name": name, "num_classes": 10, "pretrained": False}, size, dynamic_batch)


# Inputs are 32x32, or 16x16 where 3x3 convolutions over many channels (the slowest kernels
# of MindSpore's CPU backend) would make a 32x32 run take minutes.
MODELS = (
    _zoo("mobilenet_v3_small_100"),
    Net("vit", "mindcv.models.vit:VisionTransformer",
        {"image_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 4,
         "num_classes": 10}, 32, dynamic_batch=False),
    Net("resnet18", "mindcv.models.resnet:resnet18", {"num_classes": 10}, 16),
    _zoo("efficientnet_b0"),
    _zoo("ghostnet_050"),
    _zoo("squeezenet1_1"),
    _zoo("poolformer_s12", 16),
    _zoo("edgenext_xx_small", dynamic_batch=False),
    _zoo("repvgg_a0", 16),
    _zoo("mobilevit_xx_small", dynamic_batch=False),
)
QUICK = 2


def digits_file(path: Path) -> Path:
    from importlib import resources

    import numpy as np

    bundled = resources.files("amptool.samples") / "data" / "digits.npz"
    with resources.as_file(bundled) as src, np.load(src) as z:
        x, y = z["x"][:SAMPLES].astype(np.float32) / 16.0, z["y"][:SAMPLES].astype(np.int32)
    np.savez(path, x=x, y=y)
    return path


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t0, 2)


def _size_figures(m32: dict, m16: dict) -> dict:
    f32, f16, p32 = m32["file_size"], m16["file_size"], m32["params"]["bytes"]
    graph = f32 - p32
    limit = (p32 / 2 + graph) / f32
    ratio = f16 / f32
    return {"params": m32["params"]["count"], "mindir_fp32_bytes": f32, "mindir_fp16_bytes": f16,
            "param_fp32_bytes": p32, "param_fp16_bytes": m16["params"]["bytes"],
            "graph_bytes": graph, "fp16_file_ratio": round(ratio, 4),
            "fp16_file_limit": round(limit, 4), "size_ok": ratio <= limit + SIZE_SLACK}


def _export(net: Net, run: Path, out: Path, formats: tuple):
    import amptool
    from amptool import ExportConfig

    report = amptool.export(ExportConfig(run=str(run), formats=formats, out=str(out),
                                         dynamic_batch=net.dynamic_batch, batch_size=BATCH))
    return {r.precision: r for r in report}


def _verdict(candidate: dict) -> dict:
    metrics = candidate["outputs"][0]["metrics"]
    failed = [c for o in candidate["outputs"] for c in o["checks"] if not c["passed"]]
    return {"passed": candidate["passed"], "cosine": metrics.get("cosine"),
            "top1": metrics.get("top1_agree"),
            "failed_checks": [f"{c['metric']} {_num(c['value'], '.4g')} (limit {c['limit']})"
                              for c in failed],
            "findings": [f["message"] for f in candidate["findings"]
                         if f["kind"] != "fp16_emulated"]}


def _degenerate_note(candidate: dict):
    return next((f["message"] for f in candidate["findings"]
                 if f["kind"] == "degenerate_reference"), None)


def bench_net(net: Net, root: Path, data: Path, row: dict) -> dict:
    """Train, export and gate one network, filling its row of figures (``row["stage"]``
    names the step under way, for a failure's reason)."""
    import amptool
    from amptool import ParityConfig, TrainConfig
    from amptool.errors import AmpToolError

    row["stage"] = "training"
    summary, row["train_s"] = _timed(lambda: amptool.train(TrainConfig(
        model=net.model, model_args=net.args, input_spec=f"x:-1x3x{net.size}x{net.size}:float32",
        data=f"npz:{data}", epochs=EPOCHS, batch_size=BATCH, out=str(root / "train"))))
    row.update(train_steps=summary.steps, overflow_steps=summary.overflow_steps,
               val_acc=round(summary.val_acc, 4), stage="export")
    mindir, row["mindir_export_s"] = _timed(
        lambda: _export(net, root / "train", root / "export", ("MINDIR",)))
    row.update(_size_figures(mindir["fp32"].manifest, mindir["fp16"].manifest))
    t0 = time.perf_counter()
    try:
        onnx = _export(net, root / "train", root / "export", ("ONNX",))
        row.update(onnx="yes", onnx_error=None)
    except AmpToolError as exc:
        onnx = None
        row.update(onnx="no", onnx_error=str(exc).splitlines()[0])
    row["onnx_export_s"] = round(time.perf_counter() - t0, 2)
    row["export_s"] = round(row["mindir_export_s"] + row["onnx_export_s"], 2)
    golden = root / "fp32_mindir_outputs.npz"
    row["stage"] = "parity"
    fp16, row["fp16_parity_s"] = _timed(lambda: amptool.parity(ParityConfig(
        reference=mindir["fp32"].path, candidates=(mindir["fp16"].path,),
        save_outputs=str(golden))))
    row["parity_samples"] = fp16.inputs["samples"]
    cand = fp16.candidates[0]
    row["fp16"] = _verdict(cand)
    row["degenerate_reference"] = _degenerate_note(cand)
    row["onnx_parity_s"] = 0.0
    if onnx is not None:
        report, row["onnx_parity_s"] = _timed(lambda: amptool.parity(ParityConfig(
            load_outputs=str(golden), candidates=(onnx["fp32"].path, onnx["fp16"].path))))
        row["onnx_fp32"], row["onnx_fp16"] = (_verdict(c) for c in report.candidates)
    row["parity_s"] = round(row["fp16_parity_s"] + row["onnx_parity_s"], 2)
    row["result"], row["reason"] = judge(row)
    row["stage"] = "done"
    return row


def judge(row: dict) -> tuple:
    """(pass | fail | inconclusive, why): the gates a user's CI would apply to this network."""
    problems = []
    if not row["size_ok"]:
        problems.append(f"fp16 file {row['fp16_file_ratio']:.3f}x of fp32, over the limit "
                        f"{row['fp16_file_limit']:.3f}x + {SIZE_SLACK}")
    for key, what in (("fp16", "fp16 MindIR"), ("onnx_fp32", "fp32 ONNX"),
                      ("onnx_fp16", "fp16 ONNX")):
        verdict = row.get(key)
        if verdict and not verdict["passed"]:
            problems.append(f"{what} vs fp32 MindIR: " + ", ".join(verdict["failed_checks"]))
    if problems:
        return "fail", "; ".join(problems)
    if row["degenerate_reference"]:  # "output NAME: why; what follows" -> "why"
        why = row["degenerate_reference"].split("; ")[0].split(": ", 1)[-1]
        return "inconclusive", f"degenerate reference: {why}"
    return "pass", "every gate passed" + ("" if row["onnx"] == "yes" else " (MINDIR only)")


def run(quick: bool = False) -> dict:
    from amptool.runtime.device import set_device

    set_device("CPU")
    nets = MODELS[:QUICK] if quick else MODELS
    rows = []
    with tempfile.TemporaryDirectory(prefix="amptool-bench-zoo-") as tmp:
        data = digits_file(Path(tmp) / "digits.npz")
        for net in nets:
            row = {"model": net.name, "reference": net.model, "args": net.args,
                   "input": f"3x{net.size}x{net.size}"}
            try:
                bench_net(net, Path(tmp) / net.name, data, row)
            except Exception as exc:  # noqa: BLE001 (one network failing is a row, not the end)
                text = (str(exc).strip().splitlines() or [""])[0][:300]
                row.update(result="error", reason=f"{row['stage']} failed: "
                           f"{type(exc).__name__}" + (f": {text}" if text else ""))
            rows.append(row)
    return {"samples": SAMPLES, "train_samples": SAMPLES - round(SAMPLES * 0.2),
            "batch": BATCH, "epochs": EPOCHS, "amp_level": "O2", "size_slack": SIZE_SLACK,
            "device": "CPU", "mindcv": _version("mindcv"), "models": rows}


def _version(dist: str):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# --- the zoo's table ---------------------------------------------------------------------

def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _num(value, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _onnx_cell(row: dict) -> str:
    if row.get("onnx") == "yes":
        return "yes"
    if row.get("onnx") == "no":
        return f"no: {row.get('onnx_error') or '?'}"
    return "–"


def _onnx_verdict(row: dict) -> str:
    if row.get("onnx") != "yes" or "onnx_fp32" not in row:
        return "–"
    return ", ".join(f"{what} {'pass' if row[key]['passed'] else 'FAIL'}"
                     for key, what in (("onnx_fp32", "fp32"), ("onnx_fp16", "fp16")))


def _cells(row: dict, slack: float) -> list:
    """One table row; a network that failed part-way shows the figures it got to."""
    size = params = fp16 = "–"
    if "fp16_file_ratio" in row:
        size = f"{row['fp16_file_ratio']:.3f} (≤ {row['fp16_file_limit']:.3f} + {slack:g})"
        params = f"{row['params'] / 1e6:.2f} M"
    if "fp16" in row:
        fp16 = f"{_num(row['fp16']['cosine'], '.8f')}, {_num(row['fp16']['top1'], '.3f')}"
    return [row["model"], row["input"], params, size, _onnx_cell(row), fp16, _onnx_verdict(row),
            _num(row.get("export_s"), ".1f"), _num(row.get("parity_s"), ".1f"),
            f"{row['result']}: {_short(row['reason'])}"]


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def markdown(figures: dict) -> str:
    """The zoo table (Markdown) from ``run()``'s figures."""
    mindcv = f"mindcv {figures['mindcv']}" if figures.get("mindcv") else "mindcv"
    epochs = f"{figures['epochs']} epoch{'s' if figures['epochs'] != 1 else ''}"
    intro = (f"{mindcv} networks (`pretrained=False`), each trained {epochs} "
             f"on {figures['train_samples']} digits (batch {figures['batch']}, "
             f"{figures['amp_level']}) and gated on {figures['samples'] - figures['train_samples']}"
             f" held-out digits, {figures['device']}.")
    head = ("| model | input | params | fp16/fp32 MindIR (limit) | ONNX | fp16 MindIR vs fp32: "
            "cosine, top-1 | ONNX vs fp32 MindIR | export s | parity s | result |")
    lines = [intro, "", head, "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for row in figures["models"]:
        lines.append("| " + " | ".join(_cell(c) for c in _cells(row, figures["size_slack"]))
                     + " |")
        if row["reference"] != "mindcv:create_model":
            args = ", ".join(f"{k}={v}" for k, v in row["args"].items())
            notes.append(f"`{row['model']}`: `{row['reference']}({args})`")
    if notes:
        lines += ["", "; ".join(notes) + "."]
    return "\n".join(lines)


def _print_table(path: str) -> None:
    """``python -m bench.zoo --table FILE``: the table from a results file of ``python -m
    bench`` (or from the figures alone)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    print(markdown(data["benchmarks"]["zoo"]["figures"] if "benchmarks" in data else data))


if __name__ == "__main__":
    import sys

    if "--table" in sys.argv:
        _print_table(sys.argv[sys.argv.index("--table") + 1])
    else:
        figures = run(quick="--quick" in sys.argv)
        print(json.dumps(figures, indent=2))
        print(markdown(figures))
