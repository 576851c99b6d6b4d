"""``parity``: run a reference and candidates on the same real inputs and judge them.

The library returns a ``ParityReport`` (``to_dict()``: the JSON-ready report); it never
prints or exits. A breach of any threshold makes ``passed`` false: there is no warn-only mode.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

from amptool.documents.parity import CandidateResult
from amptool.ledger.url import LedgerError
from amptool.parity.accumulate import TaskStream
from amptool.parity.candidate import (Baseline, Opened, accumulate_candidate, finish_candidate,
                                      golden_head, output_names, reference_notes, report_of)
from amptool.parity.config import ParityConfig, validate
from amptool.parity.inputs import load_golden, make_inputs, save_golden
from amptool.parity.localize import vet_layer_models
from amptool.parity.report import ParityReport
from amptool.parity.shard import compare_sharded
from amptool.parity.sides import Side, check_compatible, open_side
from amptool.parity.store import Spool
from amptool.parity.stream import rows_of, spans, stored_spreads, stream_reference, whole_of
from amptool.parity.task import load_metric
from amptool.runtime.device import execution_mode, resolve_device, set_device
from amptool.stats.limits import check_output_tables


def parity(cfg: ParityConfig) -> Optional[ParityReport]:
    """Compare every candidate with the reference on real inputs (a breach is a report whose
    ``passed`` is False, not an exception); with ``cfg.ledger``, append one record per
    candidate to that ledger (a ledger that fails: ``LedgerError``, its ``measured`` the
    report).

    Runs in PyNative mode (per-layer hooks need it) and restores the caller's mode after.
    With ``cfg.sharded`` the samples are split across processes started by msrun and their
    statistics merged into the same report; on a node other than 0 (which writes it) the
    result is None.
    """
    validate(cfg)
    t0 = time.perf_counter()
    device = resolve_device(cfg.device)
    with execution_mode(graph=False):
        set_device(device, graph=False)
        report = _compare_all(cfg, device)
    if report is None:
        return None
    typed = replace(report, seconds=round(time.perf_counter() - t0, 3))
    if cfg.ledger:
        record(typed, cfg.ledger, cfg.label)
    return typed


def record(report: ParityReport, ledger: str, label: Optional[str] = None,
           measured: object = None) -> None:
    """Append one record per candidate of ``report`` to ``ledger``; a ledger that fails
    raises ``LedgerError`` carrying ``measured`` (default: the report), so that nothing
    measured is lost."""
    from amptool.ledger.store import record_report

    try:
        record_report(ledger, report, label)
    except LedgerError as exc:
        exc.measured = report if measured is None else measured
        raise


def open_all(cfg: ParityConfig) -> Opened:
    """The metric, the reference (or golden outputs) and the candidates, checked to fit."""
    fn = None
    if cfg.metric:
        fn = load_metric(cfg.metric)
    golden_in = golden_out = None
    if cfg.load_outputs:
        ref, golden_in, golden_out = load_golden(cfg.load_outputs)
    else:
        assert cfg.reference is not None  # without stored outputs the first artefact is it
        ref = open_side(cfg.reference, cfg.user_model(), cfg.ckpt, cfg.key)
    cands = [open_side(c, cfg.user_model(), cfg.ckpt, cfg.key) for c in cfg.candidates]
    for cand in cands:
        check_compatible(ref, cand)
    if cfg.per_layer:
        vet_layer_models(cfg, ref, cands)
    names = output_names(ref)
    check_output_tables(cfg.file_thresholds, names)
    return Opened(fn, ref, cands, golden_in, golden_out, names)


def _compare_all(cfg: ParityConfig, device: str = "CPU") -> Optional[ParityReport]:
    if cfg.sharded:
        return compare_sharded(cfg, open_all(cfg), device)
    sides = open_all(cfg)
    ref, cands = sides.ref, sides.cands
    with tempfile.TemporaryDirectory(prefix="amptool-parity-") as tmp:
        inputs, ref_out, spreads = _reference_outputs(cfg, ref, cands, sides.golden_in,
                                                      sides.golden_out, Path(tmp))
        run = Baseline(cfg, ref, inputs, ref_out, sides.names,
                       reference_notes(spreads, sides.names), Path(tmp))
        if sides.fn is not None:
            run.task = (sides.fn, _reference_metric(run, sides.fn))
        results = [_judge(run, cand) for cand in cands]
    return report_of(run, results, device)


def _reference_outputs(cfg: ParityConfig, ref: Side, cands: list, golden_inputs,
                       golden_out, tmp: Path) -> tuple:
    """(InputSet, the reference's outputs, their ``ReferenceSpread`` each): the reference
    run batch by batch into ``tmp``, or the stored outputs."""
    if golden_out is None:
        inputs = make_inputs(cfg, ref, cands)
        outs, fed = Spool(tmp / "reference", inputs.count), None
        if cfg.save_outputs:
            fed = Spool(tmp / "reference", inputs.count, prefix="input")
        with ref.opened() as runner:  # let go before a candidate opens
            spreads = stream_reference(runner, inputs, ref.preprocess, cfg.batch_size, outs, fed)
        stored = outs.close()
        if cfg.save_outputs and fed is not None:
            save_golden(cfg.save_outputs, ref, inputs, fed.close(), stored)
        return inputs, stored, spreads
    golden_inputs, golden_out = golden_head(cfg, golden_inputs, golden_out)
    return golden_inputs, golden_out, stored_spreads(golden_out, cfg.batch_size)


def _reference_metric(run: Baseline, fn) -> float:
    """The task metric on the reference's outputs: streamed from disk, or given them
    memory-mapped."""
    task = TaskStream(fn, str(run.cfg.metric), run.inputs.metric_targets, "reference")
    if not task.streams:
        return task.value([whole_of(r) for r in run.ref_out])
    for a, b in spans((0, run.inputs.count), run.cfg.batch_size):
        task.update(a, b, [rows_of(r, a, b) for r in run.ref_out])
    return task.value()


def _judge(run: Baseline, cand: Side) -> CandidateResult:
    spool = Path(tempfile.mkdtemp(prefix="candidate-", dir=run.spool))
    stats, faithful = accumulate_candidate(run, cand, spool)
    return finish_candidate(run, cand, stats, faithful, spool)
