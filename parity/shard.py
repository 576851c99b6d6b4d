"""Parity sharded across processes started by msrun (``--workers``, ``--nodes``).

The launching process opens the sides and the inputs, splits the samples into one
contiguous span a rank, on batch boundaries (``shard_spans``), and starts the job
(``amptool.runtime.msjob``; its worker is ``amptool.parity.shardworker``). Each rank runs the
reference on its span (its outputs written into one shared file at their rows) and every
candidate, and leaves its statistics' states (``to_state``; the streamed ``--metric``'s
state pickled) in the shard folder. Node 0's launcher then merges them in rank order and
finishes each candidate as one process does (``compare.finish_candidate``): the same report
but for the wall time. A rank that fails stops the job; the shard folder is removed either
way, the logs are kept when a rank failed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from amptool.documents.parity import ParityReport
from amptool.errors import AmpToolError, UsageError, WorkerFailed
from amptool.files.fileio import atomic_path, write_json
from amptool.network.taskmetric import STREAM_FIX, metric_mode
from amptool.parity.accumulate import CandidateStats, TaskStream
from amptool.parity.candidate import (Baseline, Opened, accumulate_candidate, empty_stats,
                                      finish_candidate, golden_head, reference_notes, report_of)
from amptool.parity.config import ParityConfig
from amptool.parity.inputs import InputSet, make_inputs, save_golden
from amptool.parity.store import Spool, stored_at
from amptool.parity.stream import rows_of, stream_reference, spans, stored_spreads
from amptool.runtime.jobwatch import Job
from amptool.runtime.msjob import (Layout, is_local, job_env, layout_problems, msrun_command,
                                   pick_port, terminate_as_exit)
from amptool.stats.stream import ReferenceSpread

WORKER_MODULE = "amptool.parity.shardworker"
KEY_ENV = "AMPTOOL_PARITY_KEY"
"""The MindIR key reaches the ranks through their environment, never a file."""
START_TIMEOUT_S = 120.0
"""Seconds every rank has to start and join (600 with several hosts, as training's)."""


def usable_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_sharding(cfg: ParityConfig, fn) -> None:
    """Refuse, in one line, a layout this host cannot run or a metric that cannot stream."""
    problems = layout_problems(cfg.workers, cfg.nodes, cfg.node_rank, cfg.master_port)
    cores = usable_cores()
    if cfg.workers > cores:
        problems.append(f"--workers {cfg.workers} is more than this host's {cores} usable "
                        "core(s)")
    if problems:
        raise UsageError("; ".join(problems), "fix --workers/--nodes/--node-rank/--master-port")
    if fn is not None and metric_mode(fn) != "stream":
        raise UsageError(f"--metric {cfg.metric} is computed on every output at once, which "
                         f"--workers/--nodes split across {cfg.workers * cfg.nodes} processes",
                         f"declare init/update/merge/result on it: {STREAM_FIX.split(', or')[0]}")


def rank_batch_size(count: int, size: int, world: int) -> int:
    """The batch size a sharded check runs at: ``size``, or smaller when ``count`` samples
    in batches of ``size`` would leave a rank without a batch (one batch a rank then).
    ``count`` fewer than ``world`` is refused: a rank would have no sample."""
    if count < world:
        raise UsageError(f"{count} samples are fewer than the {world} processes asked for",
                         "lower --workers (or --nodes), or compare more --samples")
    return size if len(spans((0, count), size)) >= world else -(-count // world)


def shard_spans(count: int, size: int, world: int) -> list:
    """[start, stop) of each rank's contiguous share of ``count`` samples, on batch
    boundaries of ``size``, the batches spread as evenly as they go."""
    batches = spans((0, count), size)
    if len(batches) < world:
        raise UsageError(f"{count} samples make {len(batches)} batch(es) of {size}, fewer than "
                         f"the {world} processes asked for",
                         "lower --workers, or set a smaller batch_size in a --config file")
    bounds = [len(batches) * r // world for r in range(world + 1)]
    return [(batches[bounds[r]][0], batches[bounds[r + 1] - 1][1]) for r in range(world)]


def compare_sharded(cfg: ParityConfig, sides: Opened, device: str) -> Optional[ParityReport]:
    """The report of ``cfg`` with the samples split across ``cfg.workers`` x ``cfg.nodes``
    ranks (None on a node other than 0: node 0 writes it)."""
    check_sharding(cfg, sides.fn)
    if sides.golden_in is None or sides.golden_out is None:
        inputs, golden_out = make_inputs(cfg, sides.ref, sides.cands), None
    else:
        inputs, golden_out = golden_head(cfg, sides.golden_in, sides.golden_out)
    world = cfg.workers * cfg.nodes
    cfg = dataclasses.replace(cfg, batch_size=rank_batch_size(inputs.count, cfg.batch_size,
                                                              world))
    shards = shard_spans(inputs.count, cfg.batch_size, world)
    with _shard_folder(cfg) as folder:
        _launch_job(cfg, folder, shards, device)
        if cfg.node_rank != 0:
            return None
        states = [_read_state(folder, rank, len(shards)) for rank in range(len(shards))]
        return _merged_report(cfg, sides, inputs, golden_out, states, folder, device)


@contextlib.contextmanager
def _shard_folder(cfg: ParityConfig) -> Iterator[Path]:
    """Where the ranks leave their states: a private temporary folder on one host, a folder
    of the working directory named after the port on several (every host must see it)."""
    if cfg.nodes == 1:
        folder = Path(tempfile.mkdtemp(prefix="amptool-parity-shards-"))
    else:
        folder = Path.cwd() / f".amptool-parity-shards-{cfg.master_port}"
        folder.mkdir(mode=0o700, exist_ok=True)
    try:
        yield folder
    finally:
        if cfg.node_rank == 0:
            shutil.rmtree(folder, ignore_errors=True)


def _launch_job(cfg: ParityConfig, folder: Path, shards: list, device: str) -> None:
    """The ranks of this host run to their end; a failing rank raises its one line."""
    hosts_scheduler = is_local(cfg.master_addr) and cfg.node_rank == 0
    port = pick_port(cfg.master_addr, cfg.master_port, hosts_scheduler)
    layout = Layout(cfg.workers, cfg.nodes, cfg.node_rank, cfg.master_addr, port)
    logs = Path(tempfile.mkdtemp(prefix="amptool-parity-logs-"))
    (logs / "config.pkl").write_bytes(pickle.dumps(dataclasses.replace(cfg, key=None)))
    config_file = logs / "config.json"
    write_json(config_file, {"folder": str(folder), "spans": [list(s) for s in shards],
                             "device": device, "serves_scheduler": hosts_scheduler})
    extra = {KEY_ENV: cfg.key.hex()} if cfg.key else {}
    timeout = START_TIMEOUT_S if cfg.nodes == 1 else 600.0
    with job_env(extra) as env:
        job = Job(msrun_command(layout, logs, WORKER_MODULE, config_file, timeout), env, logs,
                  layout.local_ranks, layout.world, timeout, hosts_scheduler)
        try:
            with terminate_as_exit():
                job.follow(lambda event: None)
        except AmpToolError:
            job.stop()
            raise  # its line names the rank and its log, which stays
        except BaseException:
            job.stop()
            shutil.rmtree(logs, ignore_errors=True)
            raise
        job.stop()
    shutil.rmtree(logs, ignore_errors=True)


def state_path(folder: Path, rank: int) -> Path:
    return folder / f"state_{rank}.pkl"


def write_state(folder: Path, rank: int, state: dict) -> None:
    """A rank's states, whole or not at all."""
    with atomic_path(state_path(folder, rank)) as tmp:
        tmp.write_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


def _read_state(folder: Path, rank: int, world: int) -> dict:
    path = state_path(folder, rank)
    if not path.is_file():
        raise WorkerFailed(f"rank {rank} of {world} finished without leaving its statistics "
                           f"in {folder}", "on several hosts, run every host from one shared "
                                           "folder (the ranks leave their states there)")
    return pickle.loads(path.read_bytes())  # written by this job's ranks, in a private folder


# -- a rank's shard ----------------------------------------------------------------------
def compare_shard(cfg: ParityConfig, sides: Opened, span: tuple, folder: Path) -> dict:
    """One rank's states: the reference's spread per output, the reference's streamed
    ``--metric`` state and each candidate's statistics, over ``span`` of the samples."""
    inputs, ref_out, spreads = _shard_reference(cfg, sides, span, folder)
    with tempfile.TemporaryDirectory(prefix="amptool-parity-") as tmp:
        run = Baseline(cfg, sides.ref, inputs, ref_out, sides.names, [], Path(tmp))
        ref_task = None
        if sides.fn is not None:
            task = TaskStream(sides.fn, str(cfg.metric), inputs.metric_targets, "reference")
            for a, b in spans(span, cfg.batch_size):
                task.update(a, b, [rows_of(r, a, b) for r in ref_out])
            ref_task, run.task = task.state, (sides.fn, None)
        cands = []
        for cand in sides.cands:
            stats, faithful = accumulate_candidate(run, cand, Path(tmp) / "candidate", span)
            cands.append({"stats": stats.to_state(), "faithful": faithful})
    return {"span": tuple(span), "spreads": [s.to_state() for s in spreads],
            "reference_task": ref_task, "candidates": cands}


def _shard_reference(cfg: ParityConfig, sides: Opened, span: tuple, folder: Path) -> tuple:
    """(InputSet, the reference's outputs, their spreads over ``span``): the reference run
    on ``span`` into the shared spool, or the golden file's outputs."""
    if sides.golden_in is not None and sides.golden_out is not None:
        inputs, golden_out = golden_head(cfg, sides.golden_in, sides.golden_out)
        return inputs, golden_out, stored_spreads(golden_out, cfg.batch_size, span)
    inputs = make_inputs(cfg, sides.ref, sides.cands)
    outs = Spool(folder / "reference", inputs.count, span=span)
    fed = (Spool(folder / "reference", inputs.count, prefix="input", span=span)
           if cfg.save_outputs else None)
    with sides.ref.opened() as runner:
        spreads = stream_reference(runner, inputs, sides.ref.preprocess, cfg.batch_size, outs,
                                fed, span)
    if fed is not None:
        fed.close()
    return inputs, outs.close(), spreads


# -- merging -----------------------------------------------------------------------------
def _spooled(folder: Path, prefix: str) -> list:
    """The arrays the ranks spooled together (``<prefix>_<i>.npy``), in output order."""
    found = sorted(folder.glob(f"{prefix}_*.npy"), key=lambda p: int(p.stem.split("_")[-1]))
    return [stored_at(str(p)) for p in found]


def _merged_report(cfg: ParityConfig, sides: Opened, inputs: InputSet, golden_out,
                   states: list, folder: Path, device: str) -> ParityReport:
    spreads = [ReferenceSpread.from_state(s) for s in states[0]["spreads"]]
    for state in states[1:]:
        for spread, other in zip(spreads, state["spreads"]):
            spread.merge(ReferenceSpread.from_state(other))
    ref_out = golden_out if golden_out is not None else _spooled(folder / "reference", "output")
    if cfg.save_outputs:
        save_golden(cfg.save_outputs, sides.ref, inputs,
                    _spooled(folder / "reference", "input"), ref_out)
    run = Baseline(cfg, sides.ref, inputs, ref_out, sides.names,
                   reference_notes(spreads, sides.names), folder)
    if sides.fn is not None:
        run.task = (sides.fn, _merged_task(cfg, sides.fn, inputs, states).value())
    results = []
    for index, cand in enumerate(sides.cands):
        spool = Path(tempfile.mkdtemp(prefix="candidate-", dir=folder))
        stats = _merged_stats(run, cand, spool, [s["candidates"][index] for s in states])
        faithful = states[0]["candidates"][index]["faithful"]
        results.append(finish_candidate(run, cand, stats, faithful, spool))
    return report_of(run, results, device)


def _merged_task(cfg: ParityConfig, fn, inputs: InputSet, states: list) -> TaskStream:
    """The reference's ``--metric`` stream, its ranks' states merged in rank order."""
    def stream(state: dict) -> TaskStream:
        task = TaskStream(fn, str(cfg.metric), inputs.metric_targets, "reference")
        task.state = state["reference_task"]
        return task

    merged = stream(states[0])
    for state in states[1:]:
        merged.merge(stream(state))
    return merged


def _merged_stats(run: Baseline, cand, spool: Path, parts: list) -> CandidateStats:
    """A candidate's statistics, its ranks' states merged in rank order."""
    merged = empty_stats(run, cand, spool).load_state(parts[0]["stats"])
    for part in parts[1:]:
        merged.merge(empty_stats(run, cand, spool).load_state(part["stats"]))
    return merged
