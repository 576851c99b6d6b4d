"""Streaming parity: peak memory and speed against the sample count.

The ``causallm`` sample (1,024 output floats a sample), seeded and exported to fp32 and
fp16 MindIR with a dynamic batch, compared on ``random:0`` token sequences at each sample
count, each run in a fresh process (its own peak RSS, ``ru_maxrss``):

* ``parity``: ``amptool.parity`` as the command runs it (inputs made, both graphs loaded,
  the reference run and spooled to disk, the candidate run and compared batch by batch);
* ``bare``: the same inputs made the same way, the same two graphs loaded and run over the
  same batches, outputs dropped: the floor parity is held to;
* ``compare``: the comparison alone (the statistics parity keeps, fed batches of the
  output's shape), what parity may spend beyond the floor.

* ``workers``: ``amptool.parity`` with ``workers=2`` (the samples split across two msrun
  processes, their statistics merged into the same report), at the largest count only,
  against the one-process ``parity`` run of the same samples.

Figures: seconds, samples/s and peak RSS of each, the ratio parity / bare and (parity -
compare) / bare (target <= 1.1) and the peak RSS of each count over the 2,048-sample one (target:
flat within 1.1x from 2,048 up); for 2 workers: wall seconds, samples/s and the speedup
over one process (the launch, msrun's start and each process's graph loads included).

A count that is no multiple of the batch (100,000 = 195 x 512 + 160) no longer compiles its
last batch's shape: parity pads that batch to the batch size (its outputs dropped), while
``bare`` here runs it as it is.

Usage: python bench/parity_stream.py [--quick] [--sizes 256,2048,16384,100000]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL = "causallm"
SIZES = (256, 2048, 16384, 100000)
QUICK_SIZES = (256, 2048)


def _child(mode: str, ref: str, cand: str, samples: int) -> dict:
    """One measured run in this process (``mode``: parity or bare)."""
    import resource

    from amptool.runtime.device import import_mindspore

    import_mindspore()
    from amptool.parity import compare
    from amptool.parity.config import ParityConfig

    cfg = ParityConfig(reference=ref, candidates=(cand,), data="random:0", samples=samples,
                       emulate_settings=False, workers=2 if mode == "workers" else 1)
    t0 = time.perf_counter()
    passed = None
    if mode in ("parity", "workers"):
        passed = compare.parity(cfg).passed
    elif mode == "compare":
        _compare_only(cfg)
    else:
        _bare(compare, cfg)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": round(seconds, 3), "peak_rss": peak, "passed": passed}


def _bare(compare, cfg) -> None:
    """Inputs made as parity makes them; both graphs loaded and run batch by batch."""
    from amptool.parity.stream import spans
    from amptool.runtime.device import execution_mode, resolve_device, set_device

    with execution_mode(graph=False):
        set_device(resolve_device(cfg.device), graph=False)
        ref = compare.open_side(cfg.reference)
        cand = compare.open_side(cfg.candidates[0])
        inputs = compare.make_inputs(cfg, ref, [cand])
        for side in (ref, cand):
            with side.opened() as runner:
                for a, b in spans((0, inputs.count), cfg.batch_size):
                    runner.run(inputs.select(slice(a, b)).for_preprocess(side.preprocess))


def _compare_only(cfg) -> None:
    """The comparison alone: a ``ReferenceSpread`` and an ``OutputStats`` fed batches of the
    network's output shape (1,024 floats a sample) for as many samples, nothing run."""
    import numpy as np

    from amptool.parity.stream import spans
    from amptool.stats.stream import OutputStats, ReferenceSpread

    rng = np.random.RandomState(0)
    ref = rng.randn(cfg.batch_size, 32, 32).astype(np.float32)
    cand = ref + (1e-3 * rng.randn(*ref.shape)).astype(np.float32)
    stats, spread = OutputStats(logits=False), ReferenceSpread()
    for a, b in spans((0, cfg.samples), cfg.batch_size):
        spread.update(ref[:b - a])
        stats.update(ref[:b - a], cand[:b - a])
    stats.result()


def _measure(mode: str, paths: dict, samples: int) -> dict:
    args = [sys.executable, __file__, "--child", mode, str(paths["fp32"]), str(paths["fp16"]),
            str(samples)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-3:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def sweep(paths: dict, sizes: tuple) -> list:
    rows = []
    for samples in sizes:
        bare, parity = _measure("bare", paths, samples), _measure("parity", paths, samples)
        compared = _measure("compare", paths, samples)
        row = {"samples": samples, "bare": bare, "parity": parity, "compare": compared}
        if not any("error" in r for r in (bare, parity, compared)):
            row["ratio"] = round(parity["seconds"] / bare["seconds"], 3)
            row["ratio_without_comparison"] = round(
                (parity["seconds"] - compared["seconds"]) / bare["seconds"], 3)
            row["samples_per_s"] = {k: round(samples / v["seconds"], 1)
                                    for k, v in (("bare", bare), ("parity", parity))}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)  # progress of a long sweep
    return rows


def two_workers(paths: dict, rows: list) -> dict:
    """2 workers against 1 process at the largest count measured (same samples)."""
    row = max((r for r in rows if "ratio" in r), key=lambda r: r["samples"], default=None)
    if row is None:
        return {}
    two = _measure("workers", paths, row["samples"])
    if "error" in two:
        return {"samples": row["samples"], "error": two["error"]}
    one = row["parity"]
    return {"samples": row["samples"], "workers": 2, "seconds_1": one["seconds"],
            "seconds_2": two["seconds"],
            "samples_per_s_1": round(row["samples"] / one["seconds"], 1),
            "samples_per_s_2": round(row["samples"] / two["seconds"], 1),
            "workers_speedup": round(one["seconds"] / two["seconds"], 3),
            "same_verdict": two["passed"] == one["passed"]}


def flatness(rows: list, base: int = 2048) -> dict:
    """Each count's parity peak RSS over the ``base``-sample run's (from ``base`` up)."""
    peaks = {r["samples"]: r["parity"].get("peak_rss") for r in rows if "parity" in r}
    if not peaks.get(base):
        return {}
    return {str(n): round(p / peaks[base], 3) for n, p in peaks.items() if n >= base and p}


def run(quick: bool = False, sizes: tuple = ()) -> dict:
    from bench.parity import _prepare

    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    with tempfile.TemporaryDirectory(prefix="amptool-bench-stream-") as tmp:
        paths = _prepare(MODEL, Path(tmp), epochs=0, dynamic=True)
        rows = sweep(paths, sizes)
        workers = two_workers(paths, rows)
    return {"model": MODEL, "floats_per_sample": 1024, "data": "random:0", "rows": rows,
            "peak_rss_over_2048": flatness(rows), "two_workers": workers,
            "targets": {"ratio_without_comparison": 1.1, "flat": 1.1}}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        mode, ref, cand, n = sys.argv[2:6]
        print(json.dumps(_child(mode, ref, cand, int(n))))
    else:
        wanted = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--sizes=")), "")
        chosen = tuple(int(s) for s in wanted.split(",") if s)
        print(json.dumps(run(quick="--quick" in sys.argv, sizes=chosen), indent=2))


def summary(f: dict) -> list:
    """(what, figure, target) rows for docs/bench.md."""
    rows = [r for r in f["rows"] if "ratio" in r]
    speed = ", ".join(f"{r['ratio_without_comparison']:.2f}× at {r['samples']:,} "
                      f"({r['samples_per_s']['parity']:g} vs {r['samples_per_s']['bare']:g} "
                      "samples/s)" for r in rows)
    peaks = ", ".join(f"{r['parity']['peak_rss'] / 2**20:,.0f} MiB at {r['samples']:,}"
                      for r in rows)
    flat = ", ".join(f"{v:.3f}× at {int(n):,}" for n, v in f["peak_rss_over_2048"].items())
    return [(f"`amptool parity` minus its comparison ÷ bare inference, {f['model']} "
             f"({f['floats_per_sample']:,} floats a sample)", speed, "≤ 1.1×"),
            ("peak RSS of `amptool parity` by sample count", peaks, ""),
            ("peak RSS ÷ the 2,048-sample run's", flat, "≤ 1.1×")] + _workers_row(f)


def _workers_row(f: dict) -> list:
    """2 workers against 1 process, in words (none when not measured)."""
    w = f.get("two_workers") or {}
    if "workers_speedup" not in w:
        return []
    return [(f"`amptool parity --workers 2` ÷ 1 process, {w['samples']:,} samples (wall)",
             f"{w['workers_speedup']:.2f}× ({w['seconds_2']:.1f} s vs {w['seconds_1']:.1f} s; "
             f"{w['samples_per_s_2']:g} vs {w['samples_per_s_1']:g} samples/s)", "")]
