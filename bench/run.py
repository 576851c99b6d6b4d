"""Run every benchmark, write ``bench/results.json``, print one table of ratios.

``python -m bench [--quick] [--only NAME,...] [--out FILE]``. Every ``bench/<name>.py``
with ``def run(quick: bool = False) -> dict`` is a benchmark; each runs in a fresh
process (a crash or a MindSpore context cannot leak into the next one) and a failure is
recorded, not fatal. Figures are measured side by side inside each benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("train_overhead", "export", "parity", "search", "pipeline", "cli_startup", "workers")
SKIP = {"run", "__main__", "__init__"}
RATIO_WORDS = ("ratio", "speedup", "overhead", "efficiency")
LABEL_KEYS = ("name", "model", "level", "format", "kind", "workers")


def discover() -> list:
    """Benchmark modules present: the known ones in ORDER, then any others by name."""
    found = [p.stem for p in HERE.glob("*.py") if p.stem not in SKIP and not p.stem.startswith("_")
             and "def run(" in p.read_text(encoding="utf-8", errors="replace")]
    return [n for n in ORDER if n in found] + sorted(set(found) - set(ORDER))


def machine() -> dict:
    from importlib import metadata

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for dist in ("mindspore", "amptool", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "load_1min_at_start": load, **versions}


def _run_child(name: str, quick: bool, timeout: float) -> dict:
    """One benchmark in its own process; its figures come back through a temp file."""
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "bench.run", "--child", name, "--result", str(result)]
        cmd += ["--quick"] if quick else []
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=HERE.parent, stdout=sys.stderr, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"status": "failed", "error": f"timed out after {timeout:g} s",
                    "seconds": round(time.perf_counter() - t0, 1)}
        seconds = round(time.perf_counter() - t0, 1)
        try:
            data = json.loads(result.read_text())
        except (OSError, ValueError):
            data = {"error": f"exited with code {code} without a result"}
    if "figures" in data:
        return {"status": "ok", "seconds": seconds, "figures": data["figures"]}
    return {"status": "failed", "seconds": seconds, "error": data["error"]}


def _child(name: str, quick: bool, result: Path) -> int:
    import importlib
    import traceback

    try:
        figures = importlib.import_module(f"bench.{name}").run(quick=quick)
        payload = {"figures": figures}
    except Exception as exc:
        traceback.print_exc()
        payload = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    result.write_text(json.dumps(payload, default=str))
    return 0 if "figures" in payload else 1


def run_all(quick: bool = False, only=None, out: Path = HERE / "results.json",
            progress=lambda line: None) -> dict:
    """Run the benchmarks, rewriting ``out`` atomically after each one."""
    from amptool.fileio import write_json

    names = discover()
    if only:
        names = [n for n in names if n in only]
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": machine(), "quick": quick, "complete": False, "benchmarks": {}}
    for name in names:
        progress(f"bench: running {name}{' (quick)' if quick else ''} ...")
        entry = _run_child(name, quick, 900.0 if quick else 3600.0)
        results["benchmarks"][name] = entry
        progress(f"bench: {name} {entry['status']} in {entry['seconds']} s"
                 + (f": {entry['error']}" if entry["status"] != "ok" else ""))
        write_json(out, results)
    results["complete"] = True
    write_json(out, results)
    return results


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            label = next((str(item[k]) for k in LABEL_KEYS if isinstance(item, dict)
                          and isinstance(item.get(k), (str, int))), str(i))
            yield from _flatten(item, f"{prefix}[{label}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix, value


def _leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1].lower()


def _is_ratio(key: str) -> bool:
    leaf = _leaf(key)
    return leaf.endswith("_x") or any(word in leaf for word in RATIO_WORDS)


def _fmt(key: str, value) -> str:
    leaf = _leaf(key)
    if "overhead" in leaf or "efficiency" in leaf:  # relative figures: 0.03 means 3 %
        return f"{value:+.1%}"
    if _is_ratio(key):
        return f"{value:.3g}x"
    if leaf.endswith("_s"):
        return f"{value:.3g} s"
    return f"{value:g}"


def _target(figures: dict, key: str) -> str:
    """A target the benchmark states: ``targets[key]`` or a sibling ``target``."""
    targets = figures.get("targets") if isinstance(figures.get("targets"), dict) else {}
    if key in targets:
        return str(targets[key])
    node = figures
    for part in key.split(".")[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and "target" in node and not isinstance(node["target"], dict):
        return str(node["target"])
    return ""


def table(results: dict) -> str:
    """One Markdown table: every ratio of every benchmark (all figures where none is a ratio)."""
    m = results["machine"]
    lines = [f"Measured {results['date']} on {m['cpu']}, {m['cores']} cores, MindSpore "
             f"{m['mindspore']}, Python {m['python']}{' (quick run)' if results['quick'] else ''}.",
             "", "| benchmark | figure | value | target |", "|---|---|---|---|"]
    for name, entry in results["benchmarks"].items():
        if entry["status"] != "ok":
            lines.append(f"| {name} | {entry['status']} | {entry.get('error', '')[:120]} | |")
            continue
        figures = entry["figures"]
        rows = [(k, v) for k, v in _flatten(figures) if not k.startswith("targets.")]
        ratios = [(k, v) for k, v in rows if _is_ratio(k)]
        for key, value in (ratios or rows[:8]):
            lines.append(f"| {name} | {key} | {_fmt(key, value)} | {_target(figures, key)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer rounds, smaller runs")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--out", type=Path, default=HERE / "results.json", help="results file")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.quick, args.result)
    if args.list:
        print("\n".join(discover()))
        return 0
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    unknown = only - set(discover())
    if unknown:
        print(f"bench: no benchmark named {', '.join(sorted(unknown))} "
              f"(have: {', '.join(discover())})", file=sys.stderr)
        return 2
    results = run_all(args.quick, only, args.out,
                      progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(table(results))
    print(f"\n(results: {args.out})")
    return 0 if all(e["status"] == "ok" for e in results["benchmarks"].values()) else 1


if __name__ == "__main__":
    if str(HERE.parent) not in sys.path:  # ``python bench/run.py`` from anywhere
        sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
