"""Run every benchmark, write ``bench/results.json``, print one table of ratios.

``python -m bench [--quick] [--only NAME,...] [--out FILE] [--timeout SECONDS]``; with
``--only`` into a results file that exists, the run is merged into it (``--merge``).
Every ``bench/<name>.py``
with ``def run(quick: bool = False) -> dict`` is a benchmark; each runs in a fresh
process (a crash or a MindSpore context cannot leak into the next one) and a failure is
recorded, not fatal. Figures are measured side by side inside each benchmark.

``python -m bench --render`` rewrites the blocks of measured figures in README.md,
docs/bench.md and docs/guides/zoo.md from the results file, ``--check`` exits 1 when one is
stale (see bench/render.py).
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

if __package__ in (None, ""):  # ``python bench/run.py`` from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.render import ORDER, header, render, table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SKIP = {"run", "render", "__main__", "__init__"}


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
    return {"cpu": cpu, "cores": os.cpu_count(),
            "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "load_1min_at_start": _load(), **git_commit(),
            **versions}


def _load():
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def git_commit() -> dict:
    """The checkout's commit and whether its tracked files differ from it (None: no git)."""
    def git(*args):
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=30, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    try:
        commit = git("rev-parse", "HEAD")
        changes = git("status", "--porcelain", "--untracked-files=no") if commit else None
    except (OSError, subprocess.SubprocessError):
        commit = changes = None
    if commit is None and os.environ.get("BENCH_COMMIT"):  # a copy of a checkout
        return {"commit": os.environ["BENCH_COMMIT"].strip(), "commit_dirty": None}
    return {"commit": commit, "commit_dirty": None if changes is None else bool(changes)}


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
            progress=lambda line: None, timeout: float = 0.0) -> dict:
    """Run the benchmarks, rewriting ``out`` atomically after each one."""
    from amptool.files.fileio import write_json

    names = discover()
    if only:
        names = [n for n in names if n in only]
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": machine(), "quick": quick, "complete": False, "benchmarks": {}}
    for name in names:
        progress(f"bench: running {name}{' (quick)' if quick else ''} ...")
        load = _load()
        entry = _run_child(name, quick, timeout or (900.0 if quick else 3600.0))
        entry.update(load_1min_at_start=load, load_1min_at_end=_load())
        results["benchmarks"][name] = entry
        progress(f"bench: {name} {entry['status']} in {entry['seconds']} s"
                 + (f": {entry['error']}" if entry["status"] != "ok" else ""))
        write_json(out, results)
    results["complete"] = True
    write_json(out, results)
    return results


def merge(part: dict, into: dict) -> list:
    """Put every benchmark that ran ok in results ``part`` (a run of some of them, maybe at
    another commit or on another machine) into results ``into``; each merged entry records
    the commit, date and processor of its run (kept when ``part`` had merged it in itself).
    Returns the merged names; a failed entry never replaces a measurement."""
    machine = part["machine"]
    names = []
    for name, entry in part["benchmarks"].items():
        if entry.get("status") != "ok":
            continue
        into["benchmarks"][name] = {
            **entry, "commit": entry.get("commit") or machine.get("commit"),
            "commit_dirty": entry.get("commit_dirty", machine.get("commit_dirty")),
            "date": entry.get("date") or part["date"],
            "cpu": entry.get("cpu") or machine.get("cpu")}
        names.append(name)
    return sorted(names)


def merge_command(part_path: Path, out: Path) -> int:
    """``--merge FILE``: 0 merged into ``out``, 2 unusable input."""
    from amptool.files.fileio import write_json

    try:
        part = json.loads(part_path.read_text(encoding="utf-8"))
        results = json.loads(out.read_text(encoding="utf-8"))
        if part.get("quick") and not results.get("quick"):
            raise ValueError("a quick (smoke) run's figures are not measurements")
        names = merge(part, results)
        if not names:
            raise ValueError("it holds no benchmark that ran ok")
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        print(f"bench: error: cannot merge {part_path} into {out}: {exc}; give a results "
              "file written by `python -m bench --only NAMES --out FILE`", file=sys.stderr)
        return 2
    write_json(out, results)
    print(f"bench: merged {', '.join(names)} into {out}; `python -m bench --render` puts "
          "them in README.md and the docs", file=sys.stderr)
    return 0


def render_command(results_path: Path, check: bool) -> int:
    """``--render``/``--check``: 0 done (or up to date), 1 stale (check), 2 unusable input."""
    try:
        stale = render(json.loads(results_path.read_text(encoding="utf-8")), check)
    except (OSError, ValueError, KeyError) as exc:
        print(f"bench: error: cannot render {results_path}: {exc}; run `python -m bench` "
              "first, and keep one <!-- bench:begin --> ... <!-- bench:end --> pair per file",
              file=sys.stderr)
        return 2
    for path in stale:
        print(f"bench: {path.relative_to(ROOT)} {'is stale' if check else 'rewritten'} "
              f"(from {results_path})", file=sys.stderr)
    if check and stale:
        print("bench: run `python -m bench --render`", file=sys.stderr)
    return 1 if check and stale else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: fewer rounds, smaller runs")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--out", type=Path, default=HERE / "results.json",
                        help="results file (written by a run, read by --render and --check)")
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="seconds one benchmark may take (default 3600, 900 with --quick)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--render", action="store_true",
                        help="rewrite the figures in README.md and the docs from the results")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if README.md or the docs differ from the results")
    parser.add_argument("--merge", type=Path, metavar="FILE",
                        help="put the benchmarks of results FILE (a run of some of them) into "
                             "--out, each with its own commit, date and processor")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.quick, args.result)
    if args.list:
        print("\n".join(discover()))
        return 0
    if args.merge:
        return merge_command(args.merge, args.out)
    if args.render or args.check:
        return render_command(args.out, args.check)
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    unknown = only - set(discover())
    if unknown:
        print(f"bench: no benchmark named {', '.join(sorted(unknown))} "
              f"(have: {', '.join(discover())})", file=sys.stderr)
        return 2
    # some benchmarks into a results file that holds others: run apart, then merged in
    part = (args.out.with_name(f".{args.out.name}.part") if only and args.out.is_file()
            else args.out)
    results = run_all(args.quick, only, part,
                      progress=lambda line: print(line, file=sys.stderr, flush=True),
                      timeout=args.timeout)
    print(header(results) + "\n\n" + table(results))
    ok = all(e["status"] == "ok" for e in results["benchmarks"].values())
    if part != args.out:
        code = merge_command(part, args.out) if ok else 1
        if code == 0:
            part.unlink()
        else:
            print(f"bench: {args.out} left as it was; this run's results are in {part}",
                  file=sys.stderr)
    print(f"\n(results: {args.out}; `python -m bench --render` puts them in README.md and "
          "the docs)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
