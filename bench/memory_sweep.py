"""Peak memory and time of export, convert and parity over a size sweep, two shapes.

For a Dense stack (4096 wide) and a transformer (width 1024, 16 heads, blocks of
attention + a 4x MLP), at about 50M, 150M, 300M and 600M parameters: a seeded fp32
``.ckpt`` is written, then each command runs in a process of its own and its peak RSS
is read from that process alone (``os.wait4``):

- ``amptool export --format MINDIR --precision both`` (÷ the fp32 parameter bytes);
- ``amptool convert ckpt --to fp16 --model`` (÷ the input file; the network named, as a run's
  checkpoint names it, so its policy's fp32 cells are found);
- ``amptool parity`` of the fp32 and fp16 MindIRs (÷ their combined weight bytes);
- the same with ``--per-layer`` (``layers``: the weight check and the two eager networks
  besides, ÷ the same bytes).

A tiny network (0.3M parameters) run through the same commands gives each command's
fixed cost (Python, MindSpore, the compiled graph); ``net`` ratios subtract it: its peak
from each peak (``net_per_byte``), and its seconds from each command's seconds
(``net_seconds_per_mparam``: marginal seconds per parameter), wall and CPU (user + system,
``net_cpu_seconds_per_mparam``). Time flatness is taken on the marginal CPU seconds
(``net_cpu_x``), since a second or two of start-up (importing MindSpore, compiling) weighs
on the 50M size alone, and the wall seconds of a process move with whatever else the
machine runs; ``net_time_x`` (marginal wall) and ``time_x`` (raw wall) stay beside it.
Past 1 GiB of weights MindSpore writes MINDIR split (graph + variables folder).
One size at a time; the largest needs about 6 GB of memory and 8 GB of disk.

Each command runs ``--repeats`` times at each size (3; 1 with ``--quick``): its seconds are
the median of those runs, its peak RSS the highest.

``python bench/memory_sweep.py [--quick] [--shapes dense,transformer] [--sizes 50,150]
[--commands export,convert,parity,layers] [--keep DIR] [--repeats N]``: ``--keep`` leaves each
size's checkpoint and artefacts in DIR and reuses those found there, so that ``--commands
parity`` measures parity alone on artefacts an earlier run exported.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL_FILE = '''
import mindspore as ms
from mindspore import nn, ops

KIND, SIZE = {kind!r}, {size!r}


class DenseStack(nn.Cell):
    def __init__(self, width, depth, classes=10):
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


class Block(nn.Cell):
    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.scale = self.head_dim ** -0.5
        self.norm1 = nn.LayerNorm((width,))
        self.qkv = nn.Dense(width, 3 * width)
        self.proj = nn.Dense(width, width)
        self.norm2 = nn.LayerNorm((width,))
        self.fc1 = nn.Dense(width, 4 * width)
        self.fc2 = nn.Dense(4 * width, width)
        self.gelu = nn.GELU()

    def construct(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, s, 3, self.heads, self.head_dim)
        qkv = qkv.transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = ops.softmax(ops.matmul(q, k.transpose(0, 1, 3, 2)) * self.scale, axis=-1)
        out = ops.matmul(att, v).transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + self.proj(out)
        return x + self.fc2(self.gelu(self.fc1(self.norm2(x))))


class Transformer(nn.Cell):
    def __init__(self, width, depth, heads=16, classes=10):
        super().__init__()
        self.blocks = nn.CellList([Block(width, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm((width,))
        self.head = nn.Dense(width, classes)

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(axis=1))


def build():
    ms.set_seed(0)
    if KIND == "dense":
        width, depth = (4096, SIZE) if SIZE else (256, 4)
        net = DenseStack(width, depth)
        net.input_shape = (1, 64, width // 64)
    else:
        width, depth = (1024, SIZE) if SIZE else (128, 1)
        net = Transformer(width, depth)
        net.input_signature = f"x:-1x16x{{width}}:float32"
    net.num_classes = 10
    return net
'''

SHAPES = {"dense": {50: 3, 150: 9, 300: 18, 600: 36},
          "transformer": {50: 4, 150: 12, 300: 24, 600: 48}}
"""Layers (Dense 4096x4096, 16.8M each) or blocks (12 x 1024^2, 12.6M each) per size."""

SAVE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import mindspore as ms
import model
net = model.build()
ms.save_checkpoint(net, sys.argv[2])
params = list(net.get_parameters())
import numpy as np
shape = net.input_shape if hasattr(net, "input_shape") else (16, net.head.in_channels)
rng = np.random.default_rng(0)
np.savez(sys.argv[3], x=rng.standard_normal((8, *shape)).astype(np.float32),
         y=np.zeros(8, np.int64))
print(json.dumps({"params": sum(int(p.size) for p in params),
                  "bytes": sum(int(p.size) * p.itemsize for p in params)}))
"""


COMMANDS = ("export", "convert", "parity", "layers")
REPEATS = 3
"""Runs of each command at each size (1 with ``--quick``): the seconds are their median, the
peak RSS their highest; a single run's CPU seconds at 50M moved by a fifth between sweeps."""


def measured(args: list, cwd: Path, env: dict | None = None) -> dict:
    """Run ``args``; exit code, seconds (wall, and CPU: user + system) and the peak RSS
    (bytes) of that process alone."""
    t0 = time.perf_counter()
    with open(cwd / "out.txt", "w") as out, open(cwd / "err.txt", "w") as err:
        proc = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    result = {"exit": proc.returncode, "seconds": round(seconds, 2),
              "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
              "peak_rss": usage.ru_maxrss * 1024}
    if proc.returncode != 0:
        result["error"] = (cwd / "err.txt").read_text().strip().splitlines()[-3:]
    result["stdout"] = (cwd / "out.txt").read_text()
    return result


def repeated(args: list, cwd: Path, repeats: int, before=None) -> dict:
    """``measured`` ``repeats`` times (``before()`` ahead of each run: clear what the last
    one wrote): the median wall and CPU seconds, the highest peak RSS, every run's CPU
    seconds (``cpu_runs``). A run that fails ends the repeats with its own result."""
    runs = []
    for _ in range(max(1, repeats)):
        if before is not None:
            before()
        done = measured(args, cwd)
        if done["exit"] != 0:
            return done
        runs.append(done)
    out = dict(runs[-1])
    for key in ("seconds", "cpu_seconds"):
        out[key] = sorted(r[key] for r in runs)[len(runs) // 2]
    out["peak_rss"] = max(r["peak_rss"] for r in runs)
    out["cpu_runs"] = [r["cpu_seconds"] for r in runs]
    return out


def amptool(*args) -> list:
    return [sys.executable, "-m", "amptool", *map(str, args)]


def weight_bytes(path: Path) -> int:
    """Bytes of an artefact's files (graph + variables folder when split)."""
    from_json = json.loads(Path(str(path) + ".json").read_text())
    return sum(f["size"] for f in from_json["files"])


def one(kind: str, size: int, layers: int | None, tmp: Path, formats: str,
        commands=COMMANDS, keep: bool = False, repeats: int = 1) -> dict:
    work = tmp / f"{kind}-{size}"
    work.mkdir(exist_ok=keep)
    (work / "model.py").write_text(MODEL_FILE.format(kind=kind, size=layers))
    ckpt = work / "w.ckpt"
    facts_file = work / "facts.json"
    if keep and facts_file.is_file() and ckpt.is_file() and (work / "x.npz").is_file():
        facts = json.loads(facts_file.read_text())
    else:
        saved = measured([sys.executable, "-c", SAVE, str(work), str(ckpt), str(work / "x.npz")],
                         work)
        if saved["exit"]:
            return {"save": {k: v for k, v in saved.items() if k != "stdout"}}
        facts = json.loads(saved["stdout"].strip().splitlines()[-1])
        facts["save_seconds"] = saved["seconds"]
        facts_file.write_text(json.dumps(facts))
    row = {"kind": kind, "size": size, "params": facts["params"], "param_bytes": facts["bytes"],
           "ckpt_bytes": ckpt.stat().st_size, "save_seconds": facts.get("save_seconds")}
    listed = work / "exported.json"
    if "export" in commands or not (keep and listed.is_file()):
        listed.unlink(missing_ok=True)
        exported = repeated(amptool("export", "--ckpt", ckpt, "--model",
                                    f"{work / 'model.py'}:build", "--data", "none", "-f",
                                    formats, "--precision", "both", "--out", work / "out",
                                    "--json"), work, repeats if "export" in commands else 1,
                            lambda: shutil.rmtree(work / "out", ignore_errors=True))
        if "export" in commands:
            row["export"] = _figures(exported, facts["bytes"])
        if exported["exit"] == 0:
            listed.write_text(exported["stdout"])
    if "convert" in commands:
        converted = repeated(amptool("convert", "ckpt", ckpt, work / "w16.ckpt", "--to", "fp16",
                                     "--model", f"{work / 'model.py'}:build"), work, repeats,
                             lambda: (work / "w16.ckpt").unlink(missing_ok=True))
        row["convert"] = _figures(converted, row["ckpt_bytes"])
        (work / "w16.ckpt").unlink(missing_ok=True)
    if listed.is_file():
        arts = {(a["precision"], a["format"]): Path(a["path"])
                for a in json.loads(listed.read_text())}
        pair = arts[("fp32", "MINDIR")], arts[("fp16", "MINDIR")]
        combined = sum(weight_bytes(p) for p in pair)
        row["artefact_bytes"] = {"fp32": weight_bytes(pair[0]), "fp16": weight_bytes(pair[1])}
        for cmd, extra in (("parity", ()), ("layers", ("--per-layer",))):
            if cmd in commands:
                compared = repeated(amptool("parity", *pair, "--samples", "8", "--data",
                                            f"npz:{work / 'x.npz'}", "-q", *extra), work,
                                    repeats)
                row[cmd] = _figures(compared, combined)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


def _figures(done: dict, base: int) -> dict:
    out = {k: v for k, v in done.items() if k != "stdout"}
    out["peak_gb"] = round(done["peak_rss"] / 1e9, 3)
    out["ratio"] = round(done["peak_rss"] / base, 3)
    return out


def _net(rows: list, fixed: dict, fixed_seconds: dict | None = None,
         fixed_cpu: dict | None = None) -> None:
    """Per-byte figures with each command's fixed cost (the tiny network's peak) taken off,
    and seconds per million parameters (also with the tiny network's seconds taken off, wall
    and CPU)."""
    fixed_seconds, fixed_cpu = fixed_seconds or {}, fixed_cpu or {}
    for row in rows:
        both = sum(row.get("artefact_bytes", {}).values())
        for cmd, base in (("export", row.get("param_bytes")), ("convert", row.get("ckpt_bytes")),
                          ("parity", both), ("layers", both)):
            if cmd in row and cmd in fixed and base and row[cmd]["exit"] == 0:
                row[cmd]["net_per_byte"] = round((row[cmd]["peak_rss"] - fixed[cmd]) / base, 3)
                row[cmd]["seconds_per_mparam"] = round(row[cmd]["seconds"] / row["params"] * 1e6,
                                                       4)
                if cmd in fixed_seconds:
                    row[cmd]["net_seconds_per_mparam"] = round(
                        (row[cmd]["seconds"] - fixed_seconds[cmd]) / row["params"] * 1e6, 4)
                if cmd in fixed_cpu and "cpu_seconds" in row[cmd]:
                    row[cmd]["net_cpu_seconds_per_mparam"] = round(
                        (row[cmd]["cpu_seconds"] - fixed_cpu[cmd]) / row["params"] * 1e6, 4)


FLAT = {"ratio": "rss_x", "net_per_byte": "net_rss_x", "seconds_per_mparam": "time_x",
        "net_seconds_per_mparam": "net_time_x", "net_cpu_seconds_per_mparam": "net_cpu_x"}
"""Figure -> name of its largest ÷ smallest over the sizes of one shape."""


def _flatness(rows: list) -> dict:
    """Largest over smallest of each per-byte figure, per shape and command."""
    out = {}
    for kind in sorted({r["kind"] for r in rows if "kind" in r}):
        mine = sorted((r for r in rows if r.get("kind") == kind), key=lambda r: r["params"])
        if len(mine) < 2:
            continue
        for cmd in COMMANDS:
            for key, name in FLAT.items():
                vals = [r[cmd].get(key) for r in mine if cmd in r]
                if len(vals) == len(mine) and all(v is not None and v > 0 for v in vals):
                    out.setdefault(kind, {}).setdefault(cmd, {})[name] = round(
                        max(vals) / min(vals), 3)
    return out


def run(quick: bool = False, shapes=("dense", "transformer"), sizes=(50, 150, 300, 600),
        formats: str = "mindir", commands=COMMANDS, keep: str | None = None,
        repeats: int | None = None) -> dict:
    if quick:
        sizes = tuple(s for s in sizes if s <= 150)
    repeats = repeats or (1 if quick else REPEATS)
    rows, fixed = [], {}
    with tempfile.TemporaryDirectory(prefix="amptool-memsweep-") as scratch:
        tmp = Path(keep) if keep else Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        tiny = one("dense", 0, None, tmp, formats, commands, bool(keep), repeats)
        fixed = {cmd: tiny[cmd]["peak_rss"] for cmd in COMMANDS if cmd in tiny}
        fixed_seconds = {cmd: tiny[cmd]["seconds"] for cmd in COMMANDS if cmd in tiny}
        fixed_cpu = {cmd: tiny[cmd]["cpu_seconds"] for cmd in COMMANDS
                     if "cpu_seconds" in tiny.get(cmd, {})}
        for kind in shapes:
            for size in sizes:
                rows.append(one(kind, size, SHAPES[kind][size], tmp, formats, commands,
                                bool(keep), repeats))
                print(json.dumps(_brief(rows[-1])), file=sys.stderr, flush=True)
    _net(rows, fixed, fixed_seconds, fixed_cpu)
    return {"fixed_peak_gb": {k: round(v / 1e9, 3) for k, v in fixed.items()},
            "fixed_seconds": fixed_seconds,
            "sizes": {f"{r['kind']} {r['size']}M": r for r in rows if "kind" in r},
            "failed": [r for r in rows if "kind" not in r], "flatness": _flatness(rows),
            "targets": {"export": "peak <= 2.0x fp32 parameter bytes",
                        "convert": "peak <= 1.5x the input file",
                        "parity": "peak <= 2.5x both artefacts' weight bytes + a batch",
                        "layers": "peak <= 2.5x both artefacts' weight bytes + a batch",
                        "flatness": "largest/smallest <= 1.3"}}


WORDS = {"export": ("`amptool export -f MINDIR --precision both`", "fp32 parameter bytes", "≤ 2×"),
         "convert": ("`amptool convert ckpt --to fp16 --model`", "input file", "≤ 1.5×"),
         "parity": ("`amptool parity` of the fp32 and fp16 MindIR, 8 samples",
                    "two artefacts' weight bytes", "≤ 2.5×"),
         "layers": ("the same `amptool parity` with `--per-layer`",
                    "two artefacts' weight bytes", "≤ 2.5×")}


def summary(f: dict) -> list:
    """The summary's rows (docs/bench.md): per command, peak RSS ÷ bytes at each size (and
    with the fixed cost taken off, with how flat that stays), then how flat marginal seconds per
    parameter stay (the raw figure beside it)."""
    rows, spread = [], []
    for cmd, (what, base, target) in WORDS.items():
        if not any(cmd in r for r in f["sizes"].values()):
            continue  # not measured in this sweep
        parts, net = [], []
        for kind in ("dense", "transformer"):
            mine = sorted((r for r in f["sizes"].values() if r["kind"] == kind),
                          key=lambda r: r["params"])
            figures = [f"{r[cmd]['ratio']:.2f}" if r.get(cmd, {}).get("exit") == 0 else "failed"
                       for r in mine]
            parts.append(f"{kind} {' / '.join(figures)}")
            flat = f["flatness"].get(kind, {}).get(cmd, {})
            values = [r[cmd]["net_per_byte"] if "net_per_byte" in r.get(cmd, {}) else None
                      for r in mine]
            net.append(" / ".join(f"{v:.2f}" if v is not None else "-" for v in values)
                       + (f" ({_direction(values, flat['net_rss_x'])})" if "net_rss_x" in flat
                          else ""))
            if "net_cpu_x" in flat:
                spread.append(f"{kind} {cmd} {flat['net_cpu_x']:.2f}× (wall "
                              f"{flat.get('net_time_x', 0):.2f}×, raw wall "
                              f"{flat['time_x']:.2f}×)")
            elif "net_time_x" in flat:
                spread.append(f"{kind} {cmd} {flat['net_time_x']:.2f}× (raw "
                              f"{flat['time_x']:.2f}×)")
            elif "time_x" in flat:
                spread.append(f"{kind} {cmd} {flat['time_x']:.2f}× (raw)")
        sizes = " / ".join(sorted({f"{r['size']}M" for r in f["sizes"].values()},
                                  key=lambda t: int(t[:-1])))
        fixed = f["fixed_peak_gb"].get(cmd)
        rows.append((f"peak RSS of {what} ÷ the {base}, at {sizes} parameters",
                     f"{'; '.join(parts)} (less the {fixed:.2f} GB a tiny network takes: "
                     f"{'; '.join(net)})", target))
    rows.append(("CPU seconds (user + system) per parameter less the tiny network's "
                 "(marginal), largest ÷ smallest size of one shape",
                 ", ".join(spread), "≤ 1.3×"))
    return rows


def _direction(values: list, spread: float) -> str:
    """How a per-byte figure moves over the sizes: flat within ``spread`` (largest ÷
    smallest), or, past 1.3×, falling or growing from the smallest size to the largest."""
    if spread <= 1.3 or None in values:
        return f"flat {spread:.2f}×"
    return f"{'falls' if values[-1] < values[0] else 'grows'} {spread:.2f}× from the " \
        "smallest size to the largest"


def _brief(row: dict) -> dict:
    return {"kind": row.get("kind"), "size": row.get("size"),
            **{cmd: (row[cmd].get("peak_gb"), row[cmd].get("ratio"), row[cmd].get("seconds"),
                     row[cmd].get("exit")) for cmd in COMMANDS if cmd in row}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", default="dense,transformer")
    parser.add_argument("--sizes", default="50,150,300,600")
    parser.add_argument("--formats", default="mindir")
    parser.add_argument("--commands", default=",".join(COMMANDS),
                        help="which commands to measure (parity and layers need an "
                             "export, made when --keep holds none)")
    parser.add_argument("--keep", default=None,
                        help="keep each size's files in this folder and reuse those there")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"runs of each command at each size (default {REPEATS}, 1 with "
                             "--quick)")
    parser.add_argument("--out", default=None, help="write the result here as JSON")
    args = parser.parse_args()
    commands = tuple(c for c in args.commands.split(",") if c)
    unknown = sorted(set(commands) - set(COMMANDS))
    if unknown:
        parser.error(f"unknown command(s) {', '.join(unknown)}; choose from {', '.join(COMMANDS)}")
    result = run(args.quick, tuple(args.shapes.split(",")),
                 tuple(int(s) for s in args.sizes.split(",")), args.formats, commands, args.keep,
                 args.repeats)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
