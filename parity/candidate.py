"""One candidate's comparison: what it is judged against (``Baseline``), its statistics
accumulated over a span of the samples (``accumulate_candidate``; a shard's merge with the
others'), and its report entry finished from them (``finish_candidate``), then the report
of every entry (``report_of``). One process (``compare``) and the merge of a sharded
check (``shard``) finish candidates alike.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, List, Optional, Union

import numpy as np

from amptool.artefact.files import file_facts
from amptool.documents.door import from_json, to_json
from amptool.documents.manifest import FileFacts
from amptool.documents.parity import (PARITY_REPORT_VERSION, CandidateResult, Finding, OutputResult,
                                      ParityReport, ReportInputs, ReportSide, TaskResult)
from amptool.errors import UsageError
from amptool.parity.accumulate import CandidateStats, OutputPlan, TaskStream
from amptool.parity.config import ParityConfig
from amptool.parity.culprit import pick_culprit
from amptool.parity.emulate import settings_ignored
from amptool.parity.inputs import InputSet
from amptool.parity.localize import failing_rows, localize_candidate, localize_failure
from amptool.parity.sides import Side, fp16_faithful
from amptool.parity.store import Spool
from amptool.parity.stream import head_of, rows_of, shape_stub, spans, stream_candidate
from amptool.parity.task import judge_task_value
from amptool.stats.counts import resolution_finding
from amptool.stats.judge import candidate_limits, output_limits, output_role
from amptool.stats.limits import Thresholds
from amptool.stats.metrics import degenerate_reference
from amptool.stats.stream import ReferenceSpread

ORT_CPU_FP16 = ("onnxruntime's CPU provider runs fp16 nodes that have no x86 fp16 kernel in "
                "fp32, so this result is no evidence that the graph is safe in fp16")


@dataclass
class Baseline:
    """What every candidate of one check is judged against."""

    cfg: ParityConfig
    ref: Side
    inputs: InputSet
    ref_out: list
    """The reference's outputs, on disk (``StoredArray``) or, from old golden files, in memory."""
    names: list
    notes: list
    spool: Path
    """A folder for what the comparison spools to disk (removed after it)."""
    task: Optional[tuple] = None
    probes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Opened:
    """The sides of one check, opened (their graphs not loaded), and what they are checked by."""

    fn: Optional[Callable]
    """The ``--metric`` function, or None."""
    ref: Side
    cands: list
    golden_in: Optional[InputSet]
    golden_out: Optional[list]
    names: list


def report_of(run: Baseline, results: list, device: str) -> ParityReport:
    """The report of every candidate's entry (``finish_candidate``) against ``run`` (its
    ``seconds`` left to the caller, who timed the whole check)."""
    inputs = run.inputs
    results = label_fp16_fidelity(results, device)
    return ParityReport(
        passed=all(r.passed for r in results),
        reference=from_json(ReportSide, run.ref.describe(), "reference"),
        inputs=from_json(ReportInputs, {
            "description": inputs.description, "samples": inputs.count,
            "labels": inputs.labels is not None, "targets": list(inputs.target_names),
            "labels_from": inputs.labels_from}, "inputs"),
        candidates=results, golden_saved=run.cfg.save_outputs or None, device=device,
        seconds=0.0, schema_version=PARITY_REPORT_VERSION)


def golden_head(cfg: ParityConfig, golden_inputs: InputSet, golden_out: list) -> tuple:
    """(InputSet, outputs) of a golden file, its first ``--samples`` when given."""
    if cfg.inputs:
        raise UsageError("--inputs cannot replace the inputs stored with --load-outputs",
                         "drop --inputs: golden outputs carry their inputs")
    if cfg.samples is not None:
        if cfg.samples > golden_inputs.count:
            raise UsageError(f"--load-outputs {cfg.load_outputs} holds {golden_inputs.count} "
                             f"samples, --samples asks for {cfg.samples}",
                             f"pass --samples {golden_inputs.count} or fewer, or save a larger "
                             "golden file")
        golden_inputs = golden_inputs.head(cfg.samples)
        golden_out = [head_of(o, cfg.samples) for o in golden_out]
    return golden_inputs, golden_out


def output_names(src: Side) -> list:
    return [str(o.get("name") or f"output{i}") for i, o in enumerate(src.outputs)]


def reference_notes(ref_out: list, names: list) -> List[Finding]:
    """Findings on reference outputs that cannot support a verdict (untrained, degenerate);
    ``ref_out``: each output's ``ReferenceSpread``, or its array."""
    notes = []
    for name, out in zip(names, ref_out):
        reason = (out.reason() if isinstance(out, ReferenceSpread)
                  else degenerate_reference(np.asarray(out)))
        if reason:
            notes.append(Finding("degenerate_reference", name,
                                 f"output {name}: {reason}; the verdict reflects untrained or "
                                 "degenerate outputs, not numerical precision",
                                 "train the network (even briefly) or check the reference's "
                                 "weights and inputs"))
    return notes


def label_fp16_fidelity(results: List[CandidateResult], device: str) -> List[CandidateResult]:
    """``results`` with each fp16 result that did not run in fp16 marked, the faithful
    check beside it named."""
    faithful = [r for r in results if r.fp16_faithful]
    here = ", ".join(f"{Path(r.path).name} ({'PASS' if r.passed else 'FAIL'})"
                     for r in faithful) or "none among these candidates"
    caveat = (f"{ORT_CPU_FP16}; the faithful fp16 check on this host is an fp16 MindIR run by "
              f"MindSpore ({device}): {here}")
    note = Finding("fp16_emulated", "runtime", caveat,
                   "judge fp16 safety by the fp16 MindIR's verdict")
    return [replace(r, caveat=caveat, findings=[*r.findings, note])
            if r.fp16_faithful is False else r for r in results]


def accumulate_candidate(run: Baseline, cand: Side, spool: Path,
                         span: Optional[tuple] = None) -> tuple:
    """(CandidateStats, fp16_faithful) of a candidate run on ``span`` of the inputs (all by
    default; a shard's statistics merge with the others'); ``spool``: a folder for what a
    whole-array ``--metric`` is given."""
    cfg, inputs = run.cfg, run.inputs
    stats = empty_stats(run, cand, spool)
    with cand.opened() as runner:  # let go before the next side opens
        stream_candidate(runner, inputs, cand.preprocess, cfg.batch_size, run.ref_out, stats, span)
        return stats, fp16_faithful(cand, runner)


def empty_stats(run: Baseline, cand: Side, spool: Path) -> CandidateStats:
    """A candidate's statistics before any sample (``spool``: as ``accumulate_candidate``)."""
    cfg, inputs = run.cfg, run.inputs
    task = None if run.task is None else TaskStream(
        run.task[0], str(cfg.metric), inputs.metric_targets, "candidate",
        Spool(spool, inputs.count))
    return CandidateStats([_plan(run, cand, i) for i in range(len(run.ref_out))], task,
                          keep_failing=cfg.per_layer)


def finish_candidate(run: Baseline, cand: Side, stats: CandidateStats, faithful,
                     spool: Path) -> CandidateResult:
    """A candidate's report entry from its statistics (merged over every sample)."""
    cfg, ref, inputs = run.cfg, run.ref, run.inputs
    th = candidate_limits(ref.precision, cand.precision, cfg.file_thresholds, cfg.thresholds,
                          _task_of(ref, cand))
    outputs = stats.outputs()
    task = None
    if stats.task is not None and run.task is not None:
        task = judge_task_value(str(cfg.metric), run.task[1], stats.task.value(),
                                th.max_metric_drop, inputs.count)
    shutil.rmtree(spool, ignore_errors=True)
    groups: List[Union[OutputResult, TaskResult]] = [*outputs, *([task] if task else [])]
    result = CandidateResult(
        path=cand.path, format=cand.format, precision=cand.precision, kind=cand.kind,
        passed=all(g.passed for g in groups), thresholds=from_json(Thresholds, th.to_dict(),
                                                                  "thresholds"),
        outputs=outputs, task=task,
        findings=[*_preprocess_findings(ref, cand, inputs), *run.notes,
                  *resolution_findings(groups), *stats.findings()],
        fp16_faithful=faithful, caveat=None, per_layer=None, weights=None, culprit=None,
        deployment=None, files=_files(cand))
    if cfg.emulate_settings:
        result = replace(result, deployment=settings_ignored(
            cfg, ref, cand, inputs, run.ref_out, run.probes,
            lambda i, r, c: _judge_whole(run, cand, i, r, c),  # informational: no verdict
            spool=str(run.spool)))
    if cfg.per_layer:
        result = localize_candidate(cfg, ref, cand, inputs, th, run.probes, result,
                                    stats.first_failing(cfg.layer_samples))
    elif cfg.localize and not result.passed:
        result = localize_failure(cfg, ref, cand, inputs, th, run.probes, result,
                                  lambda: _failing_rows(run, cand))
    if not result.passed:
        result = replace(result, culprit=pick_culprit(result))
    cand.cache.pop("weights", None)  # read for this candidate's checks, which are done
    return result


def _files(cand: Side) -> Optional[List[FileFacts]]:
    """The candidate's files with their sha256: as hashed when it opened, else now (None
    for what is no file)."""
    found = cand.files if cand.files is not None else (
        file_facts(cand.path) if Path(cand.path).is_file() else None)
    return None if found is None else [FileFacts(**f) for f in found]


def _plan(run: Baseline, cand: Side, index: int) -> OutputPlan:
    """How one output is judged, as ``amptool.stats.judge`` rules: its role (class logits or not)
    and its limits. The labels of class logits: the run's integer class labels where the
    model declares its class-logits outputs, else the inputs' labels."""
    name = run.names[index] if index < len(run.names) else f"output{index}"
    declared = _declared_logits(run.ref, cand)
    role = output_role(index, shape_stub(run.ref_out[index]), _task_of(run.ref, cand),
                       declared, run.ref.num_classes)
    labels = run.inputs.class_labels if declared is not None else run.inputs.labels
    fits = role.logits and labels is not None and len(labels) == run.inputs.count
    th = output_limits(role, (index, name), run.ref.precision, cand.precision,
                       run.cfg.file_thresholds, run.cfg.thresholds)
    return OutputPlan(name, role, th, np.asarray(labels) if fits else None)


def _failing_rows(run: Baseline, cand: Side):
    """The samples a failing candidate is localized on (``localize.failing_rows``)."""
    stats = CandidateStats([_plan(run, cand, i) for i in range(len(run.ref_out))],
                           keep_failing=True)
    return failing_rows(cand, run.inputs, run.ref_out, stats, run.cfg.batch_size,
                        run.cfg.layer_samples)


def _judge_whole(run: Baseline, cand: Side, index: int, r, c) -> OutputResult:
    """One output of whole arrays (stored or in memory) judged as ``_judge`` does."""
    stats = CandidateStats([_plan(run, cand, index)])
    for a, b in spans((0, len(c)), run.cfg.batch_size):
        stats.update(a, b, [rows_of(r, a, b)], [rows_of(c, a, b)])
    return stats.outputs()[0]


def resolution_findings(groups: list) -> List[Finding]:
    """A finding per checked count whose budget is below one of the samples counted
    (``groups``: the outputs and the task metric, as judged)."""
    found = [resolution_finding(g.name, to_json(check)) for g in groups for check in g.checks]
    return [Finding(**f) for f in found if f is not None]


def _declared_logits(ref: Side, cand: Side) -> Optional[list]:
    """The outputs the model declares as class logits (the reference's record, else the
    candidate's); None when neither records a declaration."""
    return ref.class_logits if ref.class_logits is not None else cand.class_logits


def _task_of(ref: Side, cand: Side) -> Optional[bool]:
    """Whether the sides' first output is class logits by their run's recorded loss (the
    reference's, else the candidate's); None when neither records one."""
    return ref.classifier if ref.classifier is not None else cand.classifier


def _preprocess_findings(ref: Side, cand: Side, inputs: InputSet) -> List[Finding]:
    if inputs.raw is None or not ref.preprocess or not cand.preprocess:
        return []
    a, b = ref.preprocess, cand.preprocess
    keys = [k for k in ("mean", "std")
            if not np.isclose(np.asarray(a.get(k), dtype=float),
                              np.asarray(b.get(k), dtype=float), rtol=1e-6, atol=0)]
    if not keys:
        return []
    what = ", ".join(f"{k} {b[k]:.6g} vs {a[k]:.6g}" for k in keys)
    return [Finding("preprocess", "input",
                    f"input normalization differs from the reference's ({what})",
                    "export both artefacts from the same run (the manifest's preprocess "
                    "must match the data the weights were trained on)")]
