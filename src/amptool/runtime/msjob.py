"""A job of processes started by MindSpore's msrun, for any stage: who runs where, the
command, the job watched to its end (``amptool.runtime.jobwatch``), and each process's side.

msrun starts a scheduler and ``workers`` processes of a module on this host (several hosts:
one launch per host, same master address and port). msrun runs the literal ``python`` from
PATH: ``python_shim`` puts this interpreter there. A worker module's ``main`` hands its
work to ``worker_main``, which serves as the scheduler under ``MS_ROLE=MS_SCHED`` and
otherwise reports the work's result or error through the process's status file.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from amptool.errors import AmpToolError, UsageError, WorkerFailed
from amptool.runtime.device import import_mindspore, own_process
from amptool.runtime.jobwatch import Status

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


def layout_problems(workers: int, nodes: int, node_rank: int, master_port: int) -> list:
    """What is wrong with a layout, one phrase each (none: it can be launched)."""
    problems = []
    if workers < 1:
        problems.append(f"workers must be >= 1 (got {workers})")
    if nodes < 1:
        problems.append(f"nodes must be >= 1 (got {nodes})")
    elif not 0 <= node_rank < nodes:
        problems.append(f"node rank must be in 0..{nodes - 1} (got {node_rank})")
    if master_port != 0 and not 1024 <= master_port <= 65535:
        problems.append(f"master port must be 0 or in 1024..65535 (got {master_port})")
    if nodes > 1 and master_port == 0:
        problems.append("several nodes need one --master-port that every host is given "
                        "(0 would pick a different free port on each)")
    return problems


def is_local(addr: str) -> bool:
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


def python_shim(folder: Path) -> Path:
    """A folder whose ``python`` is this interpreter (msrun runs the literal ``python``)."""
    shim = folder / "python"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    return folder


@contextlib.contextmanager
def job_env(extra: Optional[dict] = None) -> Iterator[dict]:
    """The environment of an msrun job: this interpreter first on PATH, unbuffered output,
    quiet MindSpore logs, plus ``extra``; the shim's folder is removed after."""
    shim = python_shim(Path(tempfile.mkdtemp(prefix="amptool-python-")))
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONUNBUFFERED="1", **(extra or {}))
    env.setdefault("GLOG_v", "3")
    try:
        yield env
    finally:
        shutil.rmtree(shim, ignore_errors=True)


def msrun_command(layout: Layout, logs: Path, module: str, config_file: Path,
                  start_timeout: float) -> list:
    """The msrun invocation of ``python -m module config_file`` on every local rank."""
    return [sys.executable, "-m", MSRUN_MODULE,
            f"--worker_num={layout.world}", f"--local_worker_num={layout.workers}",
            f"--master_addr={layout.master_addr}", f"--master_port={layout.master_port}",
            f"--node_rank={layout.node_rank}", f"--log_dir={logs}", "--join=True",
            f"--cluster_time_out={int(start_timeout) + 60}",  # our watcher acts first
            f"--tail_worker_log={layout.workers}",  # an index no worker has: no tail processes
            "python", "-m", module, str(config_file)]


def clear_previous(logs: Path) -> None:
    """A previous job's status files and logs."""
    for pattern in ("rank_*.json", "scheduler.json", "worker_*.log", "scheduler.log",
                    "msrun.log", "launch.json"):
        for old in logs.glob(pattern):
            old.unlink()


@contextlib.contextmanager
def terminate_as_exit():
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


# -- a worker's side ---------------------------------------------------------------------
def serve_scheduler(logs: Path, serves: bool) -> int:
    """msrun's scheduler: serves the cluster until every worker has left."""
    if not serves:  # several nodes on one host: node 0's scheduler serves, this one is idle
        return 0
    Status(logs, None).write()
    import_mindspore()
    from mindspore.communication import init

    init()
    return 0


def worker_main(config_path: Path, work: Callable[[dict, Status], dict]) -> int:
    """One process msrun started, given the launcher's JSON ``config_path``: the scheduler,
    or a worker running ``work(spec, status)`` whose result its status file reports (an
    error: its one line, or a crash's gist with the traceback in the log)."""
    own_process()
    logs = config_path.parent
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        spec = json.loads(config_path.read_text(encoding="utf-8"))
        return serve_scheduler(logs, spec.get("serves_scheduler", True))
    env_rank = os.environ.get("RANK_ID")
    status = Status(logs, int(env_rank) if env_rank is not None else os.getpid())
    status.write()
    try:
        result = work(json.loads(config_path.read_text(encoding="utf-8")), status)
    except AmpToolError as exc:
        print(f"amptool: error: {exc}", file=sys.stderr, flush=True)
        status.write(phase="failed", error=str(exc), error_type=type(exc).__name__,
                     problem=exc.problem, fix=exc.fix, exit_code=exc.exit_code)
        return exc.exit_code
    except Exception as exc:  # a crash: keep the traceback in the log, the gist in the status
        traceback.print_exc()
        sys.stderr.flush()
        status.write(phase="failed", error=f"{type(exc).__name__}: {exc}"[:300],
                     error_type="crash", exit_code=1)
        return 1
    status.write(phase="done", summary=result)
    return 0
