"""``launch_workers``: data-parallel training through MindSpore's msrun, watched to the end.

msrun starts a scheduler and ``--workers`` processes of ``amptool.train.worker`` on this
host (several hosts: one launch per host, same ``--master-addr``/``--master-port``). Each
process reports through a status file in ``<out>/logs/`` (see worker.py); the launcher
follows them and stops the whole job, with every process it started, as soon as one
rank fails, dies, or has not joined within ``start_timeout`` seconds.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from amptool.errors import AmpToolError, CheckFailed, UsageError, WorkerFailed
from amptool.fileio import ensure_out_dir, write_json

from .config import TrainConfig
from .watch import Job

MSRUN_MODULE = "mindspore.parallel.cluster.run"


@dataclass(frozen=True)
class Layout:
    """Who runs where: ``workers`` per host on ``nodes`` hosts, this host is ``node_rank``."""

    workers: int
    nodes: int
    node_rank: int
    master_addr: str
    master_port: int

    @property
    def world(self) -> int:
        return self.workers * self.nodes

    @property
    def local_ranks(self) -> list:
        return [self.node_rank * self.workers + i for i in range(self.workers)]


def check_layout(cfg: TrainConfig, nodes: int, node_rank: int, master_port: int) -> None:
    problems = []
    if cfg.workers < 1:
        problems.append(f"workers must be >= 1 (got {cfg.workers})")
    if nodes < 1:
        problems.append(f"nodes must be >= 1 (got {nodes})")
    elif not 0 <= node_rank < nodes:
        problems.append(f"node rank must be in 0..{nodes - 1} (got {node_rank})")
    if master_port != 0 and not 1024 <= master_port <= 65535:
        problems.append(f"master port must be 0 or in 1024..65535 (got {master_port})")
    if nodes > 1 and master_port == 0:
        problems.append("several nodes need one --master-port that every host is given "
                        "(0 would pick a different free port on each)")
    if problems:
        raise UsageError("; ".join(problems), "fix --workers/--nodes/--node-rank/--master-port")


def _is_local(addr: str) -> bool:
    """Whether ``addr`` is this host (msrun then starts its scheduler here)."""
    try:
        ip = socket.gethostbyname(addr)
    except OSError:
        raise UsageError(f"master address '{addr}' does not resolve",
                         "pass the rank-0 host's IP address as --master-addr") from None
    if ip.startswith("127.") or ip == "0.0.0.0":
        return True
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((ip, 0))  # only an address of one of this host's interfaces binds
        return True
    except OSError:
        return False


def pick_port(master_addr: str, port: int, hosts_scheduler: bool) -> int:
    """A free port for 0; on the scheduler's host, refuse a port already taken."""
    if port == 0:
        if not hosts_scheduler:
            raise UsageError("--master-port 0 cannot be used with several hosts",
                             "pass the same fixed --master-port on every host")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return s.getsockname()[1]
    if hosts_scheduler:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no conflict
            try:
                s.bind(("", port))
            except OSError:
                raise WorkerFailed(f"master port {port} is already in use on this host, so "
                                   "msrun's scheduler cannot start",
                                   "pass another --master-port, or 0 to pick a free one") from None
    return port


def _python_shim(folder: Path) -> Path:
    """A folder whose ``python`` is this interpreter (msrun runs the literal ``python``)."""
    shim = folder / "python"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    return folder


def msrun_command(layout: Layout, logs: Path, config_file: Path, start_timeout: float) -> list:
    """The msrun invocation; the worker module is run with the interpreter on PATH."""
    return [sys.executable, "-m", MSRUN_MODULE,
            f"--worker_num={layout.world}", f"--local_worker_num={layout.workers}",
            f"--master_addr={layout.master_addr}", f"--master_port={layout.master_port}",
            f"--node_rank={layout.node_rank}", f"--log_dir={logs}", "--join=True",
            f"--cluster_time_out={int(start_timeout) + 60}",  # our watcher acts first
            f"--tail_worker_log={layout.workers}",  # an index no worker has: no tail processes
            "python", "-m", "amptool.train.worker", str(config_file)]


def _clear_previous(logs: Path) -> None:
    for pattern in ("rank_*.json", "scheduler.json", "worker_*.log", "scheduler.log",
                    "msrun.log", "launch.json"):
        for old in logs.glob(pattern):
            old.unlink()


def launch_workers(cfg: TrainConfig, nodes: int = 1, node_rank: int = 0,
                   master_addr: str = "127.0.0.1", master_port: int = 0, quiet: bool = False,
                   on_event: Optional[Callable[[dict], None]] = None,
                   start_timeout: Optional[float] = None) -> dict:
    """Run ``cfg`` on ``cfg.workers`` x ``nodes`` data-parallel ranks; rank 0's summary back.

    Raises WorkerFailed (exit 1) naming the failing rank and its log when any rank crashes,
    dies or does not join in time; the job is stopped first, nothing it started survives.
    A rank's own amptool error (bad data, diverged run) is raised as that error.
    """
    from .checks import validate

    validate(cfg)
    check_layout(cfg, nodes, node_rank, master_port)
    if start_timeout is None:
        start_timeout = 120.0 if nodes == 1 else 600.0
    if not start_timeout > 0:
        raise UsageError(f"start timeout must be > 0 seconds (got {start_timeout:g})",
                         "pass a positive --start-timeout")
    # msrun starts a scheduler wherever the master address is local; only node 0's serves
    hosts_scheduler = _is_local(master_addr) and node_rank == 0
    port = pick_port(master_addr, master_port, hosts_scheduler)
    layout = Layout(cfg.workers, nodes, node_rank, master_addr, port)
    out = ensure_out_dir(cfg.out)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    _clear_previous(logs)
    config_file = logs / "config.json"
    write_json(config_file, {"config": cfg.to_dict(), "lead_ranks": [layout.local_ranks[0]],
                             "serves_scheduler": hosts_scheduler})
    emit = (on_event or (lambda event: None)) if not quiet else (lambda event: None)
    shim = _python_shim(Path(tempfile.mkdtemp(prefix="amptool-python-")))
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONUNBUFFERED="1")
    env.setdefault("GLOG_v", "3")
    job = Job(msrun_command(layout, logs, config_file, start_timeout), env, logs,
              layout.local_ranks, layout.world, float(start_timeout), hosts_scheduler)
    emit({"kind": "launch", "workers": layout.world, "nodes": nodes, "port": port,
          "logs": str(logs)})
    try:
        with _terminate_as_exit():
            job.run(emit)
    except AmpToolError as exc:
        job.stop()
        _drop_partial_files(out)
        if isinstance(exc, CheckFailed):  # a crash or divergence: say what survived
            raise type(exc)(exc.problem, _fix_after_failure(exc, out, cfg)) from None
        raise
    finally:
        job.stop()
        shutil.rmtree(shim, ignore_errors=True)
    return _summary(job, cfg, layout, out)


@contextlib.contextmanager
def _terminate_as_exit():
    """SIGTERM unwinds like Ctrl+C (``KeyboardInterrupt``: the command line's exit 130), so
    the job is stopped rather than orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _drop_partial_files(out: Path) -> None:
    """Temp folders of a checkpoint write cut short by the stop; finished files stay."""
    for tmp in out.glob(".amptool-tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def _fix_after_failure(exc: AmpToolError, out: Path, cfg: TrainConfig) -> str:
    from amptool.rundir import RunDir

    last = RunDir(out).checkpoint_path("last", cfg.ckpt_format)
    kept = (f"last good checkpoint kept: {last}" if last.is_file()
            else "no checkpoint had been written yet")
    return f"{exc.fix}; {kept}" if exc.fix else kept


def _summary(job: Job, cfg: TrainConfig, layout: Layout, out: Path) -> dict:
    states = [job.states[r] for r in layout.local_ranks]
    summary = dict(states[0]["summary"])
    digests = {s["summary"].get("weights_sha256") for s in states}
    summary.update(workers=layout.world, nodes=layout.nodes,
                   global_batch=cfg.batch_size * layout.world, logs=str(out / "logs"),
                   ranks_identical=len(digests) == 1 and None not in digests)
    return summary

