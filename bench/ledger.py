"""The parity ledger's costs: one insert, a trend over 10,000 records, and ``verify`` of a
1.3 GB artefact against hashing its files.

- insert: ``record_report`` of one candidate (its ledger opened, the record and its figures
  appended in one transaction, closed), in this warm process: median and 95th percentile
  over the rounds, on SQLite (and PostgreSQL where ``AMPTOOL_TEST_POSTGRES_URL`` answers);
- trend: 10,000 records of one kind of artefact (five figures an output), then
  ``amptool ledger trend --max-drift ... --report page.html`` as a fresh process (its
  start-up included) and ``trend`` plus the page in this process;
- verify: a 1.3 GB network (5 x Dense(8192, 8192)) exported once as MindSpore writes it past
  1 GiB (a graph file and a variables folder), one record of its bytes in a ledger; then,
  interleaved round by round with the files in the page cache, ``verify`` in this process
  and the sha256 of its files alone (the floor), and ``amptool verify`` as a process.
"""
from __future__ import annotations

import json
import os
import resource
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import amptool_command
from bench.big_export import MODEL_FILE  # its BigMLP, five layers deep here


def _report(path: str, files: list, p999: float = 0.002):
    """A one-candidate parity report of ``path`` (``files``: its files as hashed)."""
    from amptool.documents.parity import ParityReport

    limits = {"min_cosine": 0.999, "min_top1": 0.99, "max_acc_drop": 0.005, "max_abs": None,
              "max_abs_scaled": None, "max_p999_abs_scaled": None, "max_rel": None,
              "max_outside": None, "atol": 1e-3, "rtol": 1e-2, "allow_nonfinite": False,
              "max_metric_drop": 0.0}
    metrics = {"max_abs": 0.01, "max_abs_scaled": 2 * p999, "p999_abs_scaled": p999,
               "ref_absmax": 8.0, "max_rel": 0.2, "mean_abs": 1e-3, "rmse": 2e-3,
               "cosine": 0.99998, "rel_l2": 3e-4, "outside_frac": 0.01, "nonfinite": 0,
               "top1_agree": 1.0, "top1_agree_clear": 1.0, "near_tie_flips": 0,
               "counted": 1000, "ref_acc": 0.95, "cand_acc": 0.95, "acc_drop": 0.0,
               "acc_drop_clear": 0.0, "acc_drop_clear_ci": [-0.004, 0.004]}
    cand = {"path": path, "format": "MINDIR", "precision": "fp16", "kind": "artefact",
            "passed": True, "thresholds": limits, "task": None, "findings": [],
            "fp16_faithful": True, "caveat": None, "per_layer": None, "weights": None,
            "culprit": None, "deployment": None, "files": files,
            "outputs": [{"name": "logits", "metrics": metrics, "checks": [], "passed": True,
                         "thresholds": limits}]}
    return ParityReport.from_dict({
        "passed": True, "reference": {"path": "ref.mindir", "kind": "artefact",
                                      "format": "MINDIR", "precision": "fp32",
                                      "model": "big", "preprocess": None, "policy": None},
        "inputs": {"description": "digits", "samples": 1000, "labels": True, "targets": [],
                   "labels_from": "digits"},
        "candidates": [cand], "golden_saved": None, "device": "CPU", "seconds": 1.0,
        "schema_version": 1})


def _context(i: int):
    from amptool.ledger.record import RecordContext

    return RecordContext(f"2026-01-01T00:00:{i % 60:02d}+00:00", "0.1.0", "2.10.0",
                         f"{i:040x}", "main", None)


def insert_ms(url: str, rounds: int) -> dict:
    """Median and 95th-percentile ms of one ``record_report`` (open, append, close)."""
    from amptool.ledger.store import record_report

    files = [{"path": "net.mindir", "size": 1, "sha256": "a" * 64}]
    rep = _report("net.mindir", files)
    record_report(url, rep, context=_context(0))  # the ledger made once
    times = []
    for i in range(rounds):
        t0 = time.perf_counter()
        record_report(url, rep, context=_context(i))
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {"rounds": rounds, "median_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2)}


def trend_seconds(folder: Path, records: int, rounds: int) -> dict:
    """A ledger of ``records`` records (a slow drift in the last ones), then the trend."""
    from amptool.gate.trend import DriftBudget, trend
    from amptool.gate.trendpage import render
    from amptool.ledger.record import records_from_report
    from amptool.ledger.store import RecordFilter, open_ledger

    url = str(folder / "trend.db")
    files = [{"path": "net.mindir", "size": 1, "sha256": "b" * 64}]
    with open_ledger(url, create=True) as book:
        for start in range(0, records, 1000):
            batch = []
            for i in range(start, min(records, start + 1000)):
                p999 = 0.002 * (1 + 0.02 * ((i * 7919) % 11 - 5) / 5) * 1.05 ** max(
                    0, i - records + 20)
                batch += records_from_report(_report("net.mindir", files, p999), _context(i))
            book.append(batch)
    one = str(folder / "one.db")
    with open_ledger(one, create=True) as book:
        book.append(records_from_report(_report("net.mindir", files), _context(0)))
    args = ["ledger", "trend", "--max-drift", "p999_abs_scaled=20%",
            "--report", str(folder / "trend.html")]
    cli, floor, api, cli_cpu, api_cpu = [], [], [], [], []
    budget = [DriftBudget.parse("p999_abs_scaled=20%")]
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run(amptool_command() + args + ["--ledger", one], capture_output=True)
        floor.append(time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), _children_cpu()
        done = subprocess.run(amptool_command() + args + ["--ledger", url], capture_output=True,
                              text=True)
        cli.append(time.perf_counter() - t0)
        cli_cpu.append(_children_cpu() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        found = trend(url, RecordFilter(), (), budget)
        render(found)
        api.append(time.perf_counter() - t0)
        api_cpu.append(time.process_time() - c0)
    return {"records": records, "rounds": rounds, "exit": done.returncode,
            "caught_drift": "FAIL p999_abs_scaled" in done.stdout,
            "page_kb": round((folder / "trend.html").stat().st_size / 1e3, 1),
            "cli_s": round(statistics.median(cli), 3),
            "cli_cpu_s": round(statistics.median(cli_cpu), 3),
            "cli_one_record_s": round(statistics.median(floor), 3),
            "api_s": round(statistics.median(api), 3),
            "api_cpu_s": round(statistics.median(api_cpu), 3)}


def _children_cpu() -> float:
    """CPU seconds of the finished child processes so far (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def big_artefact(folder: Path) -> Path:
    """The 1.3 GB network's checkpoint exported once by ``amptool export`` (fp32 MINDIR)."""
    (folder / "big.py").write_text(MODEL_FILE.format(depth=5))
    sys.path.insert(0, str(folder))
    import mindspore as ms

    import big

    net = big.big_mlp()
    ms.save_checkpoint(net, str(folder / "big.ckpt"))
    del net
    done = subprocess.run(amptool_command() + [
        "export", "--ckpt", str(folder / "big.ckpt"), "--model", f"{folder / 'big.py'}:big_mlp",
        "--data", "none", "-f", "mindir", "--precision", "fp32", "--out", str(folder / "out"),
        "--json"], capture_output=True, text=True, cwd=folder)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    (folder / "big.ckpt").unlink()
    return Path(json.loads(done.stdout)[0]["path"])


def plain_sha256(path: Path) -> str:
    """The floor verify is held to: a file's sha256 as Python's own ``hashlib.file_digest``
    takes it (not amptool's hashing, whose choices the figure measures)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def verify_seconds(folder: Path, rounds: int) -> dict:
    from amptool.artefact.files import artefact_files, file_facts
    from amptool.gate.verify import verify
    from amptool.ledger.store import record_report

    art = big_artefact(folder)
    files = file_facts(art)  # also brings the files into the page cache
    ledger = str(folder / "verify.db")
    record_report(ledger, _report(str(art), files), context=_context(1))
    small = folder / "small.mindir"
    small.write_bytes(b"\0" * 4096)  # never checked: the command's start-up and answer
    hashing, api, cli, floor = [], [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run(amptool_command() + ["verify", str(small), "--ledger", ledger],
                       capture_output=True)
        floor.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for f in artefact_files(art):
            plain_sha256(f)
        hashing.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        found = verify(str(art), ledger=ledger)
        api.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        done = subprocess.run(amptool_command() + ["verify", str(art), "--ledger", ledger],
                              capture_output=True, text=True)
        cli.append(time.perf_counter() - t0)
    sha_s, api_s, cli_s, small_s = (statistics.median(v) for v in (hashing, api, cli, floor))
    return {"bytes": sum(f["size"] for f in files), "files": len(files), "rounds": rounds,
            "verified": found.passed and done.returncode == 0,
            "sha256_s": round(sha_s, 3), "api_s": round(api_s, 3), "cli_s": round(cli_s, 3),
            "cli_4kb_s": round(small_s, 3),
            "api_vs_sha256_ratio": round(api_s / sha_s, 3),
            "cli_vs_sha256_ratio": round(cli_s / sha_s, 3)}


def run(quick: bool = False) -> dict:
    from amptool.ledger.url import ledger_url

    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="amptool-bench-ledger-") as tmp:
        folder = Path(tmp)
        rounds = 20 if quick else 200
        figures["insert"] = {"sqlite": insert_ms(str(folder / "insert.db"), rounds)}
        server = os.environ.get("AMPTOOL_TEST_POSTGRES_URL")
        if server:
            figures["insert"]["postgresql"] = _postgres_insert(ledger_url(server), rounds)
        figures["trend"] = trend_seconds(folder, 1000 if quick else 10_000, 3 if quick else 5)
        if not quick:
            figures["verify"] = verify_seconds(folder, 5)
    figures["targets"] = {"insert.sqlite.median_ms": "<= 50", "trend.api_s": "<= 1",
                          "verify.cli_vs_sha256_ratio": "<= 1.5"}
    return figures


def _postgres_insert(server: str, rounds: int) -> dict:
    """``insert_ms`` on a database made for it on ``server`` (dropped after)."""
    import uuid

    import sqlalchemy as sa

    name = f"amptool_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        url = sa.engine.make_url(server).set(database=name).render_as_string(False)
        return insert_ms(url, rounds)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def summary(f: dict) -> list:
    """(what, figure, target) rows for docs/bench.md."""
    ins = f["insert"]
    where = ", ".join(f"{k} {v['median_ms']:.1f} ms (95th percentile {v['p95_ms']:.1f} ms)"
                      for k, v in ins.items())
    t = f["trend"]
    rows = [("ledger insert: one candidate's record (open, append, close)", where, "≤ 50 ms"),
            (f"`amptool ledger trend --max-drift ... --report` over {t['records']:,} records: "
             "in-process (read, drift, page); the command as a fresh process, and on a "
             "one-record ledger (its start-up)",
             f"{t['api_s']:.2f} s ({t['api_cpu_s']:.2f} CPU-s); {t['cli_s']:.2f} s "
             f"({t['cli_cpu_s']:.2f} CPU-s; {t['cli_one_record_s']:.2f} s on one record), "
             f"page {t['page_kb']:,.0f} kB", "≤ 1 s")]
    v = f.get("verify")
    if v:
        rows.append((f"`amptool verify` of a {v['bytes'] / 1e9:.2f} GB artefact ({v['files']} "
                     "files) ÷ the sha256 of its files",
                     f"{v['cli_vs_sha256_ratio']:.2f}× ({v['cli_s']:.2f} s vs "
                     f"{v['sha256_s']:.2f} s; the command on a 4 kB file "
                     f"{v['cli_4kb_s']:.2f} s); in-process {v['api_vs_sha256_ratio']:.2f}×",
                     "≤ 1.5×"))
    return rows


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
