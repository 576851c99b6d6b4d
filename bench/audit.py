"""The precision audit's cost against the export it is part of.

Two networks from their initial weights (the audit reads graphs, not values): the residual
sample (its batch normalizations kept in fp32) and mindcv's mobilenet_v3_small_100 (about
500 MindIR nodes), each exported to MINDIR and ONNX in fp32 and fp16 in one ``export`` call,
which audits every graph it writes. Side by side in that call: the audit's seconds
(``ExportResult.audit``) and the export's wall seconds; then each file audited again alone
(``audit_artefact``, median of a few rounds, the policy read from its provenance).
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

NETWORKS = {
    "resnet sample": ("resnet", None, None),
    "mobilenet_v3_small_100": ("mindcv:create_model",
                               {"model_name": "mobilenet_v3_small_100", "num_classes": 10,
                                "pretrained": False}, "x:-1x3x32x32:float32"),
}


def bench_network(label: str, model: str, args, spec_text, tmp: Path, rounds: int) -> dict:
    import mindspore as ms

    from amptool.artefact.audit import audit_artefact
    from amptool.export.api import ExportConfig, export
    from amptool.network.models import resolve_model

    spec = resolve_model(model, args, spec_text)
    ms.set_seed(0)
    ckpt = tmp / f"{spec.name.replace(':', '_')}.ckpt"
    ms.save_checkpoint(spec.build(), str(ckpt))
    t0 = time.perf_counter()
    results = export(ExportConfig(ckpt=str(ckpt), model=model, model_args=args,
                                  input_spec=spec_text, formats=("MINDIR", "ONNX"),
                                  dynamic_batch=True, data="none", out=str(tmp / "out")))
    export_s = time.perf_counter() - t0
    rows, audit_s = [], 0.0
    for r in results:
        alone = []
        for _ in range(rounds):
            started = time.perf_counter()
            report = audit_artefact(r.path)
            alone.append(time.perf_counter() - started)
        audit_s += r.audit.seconds
        rows.append({"format": r.format, "precision": r.precision, "nodes": report.nodes,
                     "findings": len(report.findings),
                     "artefact_export_s": round(r.manifest["export_seconds"], 4),
                     "audit_in_export_s": r.audit.seconds,
                     "audit_alone_median_s": round(statistics.median(alone), 4)})
    return {"name": label, "export_s": round(export_s, 3), "audit_s": round(audit_s, 4),
            "audit_overhead": round(audit_s / export_s, 4), "artefacts": rows}


def run(quick: bool = False) -> dict:
    """Per network: the export's wall seconds, the audit's within it, their ratio."""
    from amptool.runtime.device import import_mindspore

    import_mindspore()
    rounds = 2 if quick else 5
    networks = []
    with tempfile.TemporaryDirectory(prefix="amptool-bench-audit-") as tmp:
        for i, (label, (model, args, spec)) in enumerate(NETWORKS.items()):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            networks.append(bench_network(label, model, args, spec, folder, rounds))
    return {"rounds": rounds, "networks": networks,
            "targets": {"audit_overhead": "<= 10% of the export"}}


def summary(figures: dict) -> list:
    """(what, figure, target) rows for docs/bench.md."""
    return [(f"precision audit within `export` (MINDIR + ONNX, fp32 + fp16), {n['name']}",
             f"{n['audit_s']:.3f} s of {n['export_s']:.2f} s ({n['audit_overhead']:.1%})",
             "≤ 10% of the export") for n in figures["networks"]]


if __name__ == "__main__":
    out = run(quick="--quick" in sys.argv[1:])
    for n in out["networks"]:
        print(f"{n['name']}: export {n['export_s']:.2f} s, audit {n['audit_s']:.3f} s "
              f"({n['audit_overhead']:.1%})")
        for a in n["artefacts"]:
            print(f"  {a['format']} {a['precision']}: {a['nodes']} nodes, audit "
                  f"{a['audit_in_export_s']:.3f} s in the export, {a['audit_alone_median_s']:.3f}"
                  f" s alone; the artefact's export {a['artefact_export_s']:.2f} s")
