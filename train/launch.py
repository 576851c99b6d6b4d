"""``launch_workers``: data-parallel training through MindSpore's msrun, watched to the end.

msrun starts a scheduler and ``--workers`` processes of ``amptool.train.worker`` on this
host (several hosts: one launch per host, same ``--master-addr``/``--master-port``; the
job's machinery is the core's ``amptool.runtime.msjob``). Each process reports through a status
file in ``<out>/logs/``; the launcher follows them and stops the whole job, with every
process it started, as soon as one rank fails, dies, or has not joined within
``start_timeout`` seconds.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Optional

from amptool.documents.events import Launch, TrainEvent, read_event
from amptool.errors import AmpToolError, CheckFailed, UsageError
from amptool.files.fileio import ensure_out_dir, write_json
from amptool.runs.rundir import RunDir
from amptool.runtime.jobwatch import Job
from amptool.runtime.msjob import (Layout, clear_previous, is_local, job_env, layout_problems,
                                   pick_port, terminate_as_exit)
from amptool.runtime.msjob import msrun_command as job_command

from .checks import validate
from .config import TrainConfig

WORKER_MODULE = "amptool.train.worker"


def check_layout(cfg: TrainConfig, nodes: int, node_rank: int, master_port: int) -> None:
    problems = layout_problems(cfg.workers, nodes, node_rank, master_port)
    if problems:
        raise UsageError("; ".join(problems), "fix --workers/--nodes/--node-rank/--master-port")


def msrun_command(layout: Layout, logs: Path, config_file: Path, start_timeout: float) -> list:
    """The msrun invocation; the worker module is run with the interpreter on PATH."""
    return job_command(layout, logs, WORKER_MODULE, config_file, start_timeout)


def launch_workers(cfg: TrainConfig, nodes: int = 1, node_rank: int = 0,
                   master_addr: str = "127.0.0.1", master_port: int = 0, quiet: bool = False,
                   on_event: Optional[Callable[[TrainEvent], None]] = None,
                   start_timeout: Optional[float] = None) -> dict:
    """Run ``cfg`` on ``cfg.workers`` x ``nodes`` data-parallel ranks; rank 0's summary back.

    Raises WorkerFailed (exit 1) naming the failing rank and its log when any rank crashes,
    dies or does not join in time; the job is stopped first, nothing it started survives.
    A rank's own amptool error (bad data, diverged run) is raised as that error.
    """
    validate(cfg)
    check_layout(cfg, nodes, node_rank, master_port)
    if start_timeout is None:
        start_timeout = 120.0 if nodes == 1 else 600.0
    if not start_timeout > 0:
        raise UsageError(f"start timeout must be > 0 seconds (got {start_timeout:g})",
                         "pass a positive --start-timeout")
    # msrun starts a scheduler wherever the master address is local; only node 0's serves
    hosts_scheduler = is_local(master_addr) and node_rank == 0
    port = pick_port(master_addr, master_port, hosts_scheduler)
    layout = Layout(cfg.workers, nodes, node_rank, master_addr, port)
    out = ensure_out_dir(cfg.out)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    clear_previous(logs)
    config_file = logs / "config.json"
    write_json(config_file, {"config": cfg.to_dict(), "lead_ranks": [layout.local_ranks[0]],
                             "serves_scheduler": hosts_scheduler})
    emit = (on_event or (lambda event: None)) if not quiet else (lambda event: None)
    with job_env() as env:
        job = Job(msrun_command(layout, logs, config_file, start_timeout), env, logs,
                  layout.local_ranks, layout.world, float(start_timeout), hosts_scheduler)
        emit(Launch(layout.world, nodes, port, str(logs)))
        try:
            with terminate_as_exit():
                job.follow(lambda line: emit(read_event(line)))  # the lead rank's events
        except AmpToolError as exc:
            job.stop()
            _drop_partial_files(out)
            if isinstance(exc, CheckFailed):  # a crash or divergence: say what survived
                raise type(exc)(exc.problem, _fix_after_failure(exc, out, cfg)) from None
            raise
        finally:
            job.stop()
    return _summary(job, cfg, layout, out)


def _drop_partial_files(out: Path) -> None:
    """Temp folders of a checkpoint write cut short by the stop; finished files stay."""
    for tmp in out.glob(".amptool-tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def _fix_after_failure(exc: AmpToolError, out: Path, cfg: TrainConfig) -> str:
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

